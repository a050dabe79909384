"""Chunk counts, token sizes and throughput of the semantic chunkers on a corpus.

Usage, from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/studies/semantic_chunkers.py [--data DIR]

Every `*.md` file under `--data` is one document. Each document is tokenized
once (not timed); each chunker's time covers cutting pieces, embedding them (or
their windows) and choosing the chunks.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from transforms.chunking.chunkers import (
    CLUSTER_SEMANTIC,
    RECURSIVE,
    SEMANTIC_BREAKPOINT,
    TokenIndex,
    split_recursive,
    token_offsets,
)
from transforms.chunking.semantic import piece_spans, semantic_spans  # noqa: E402
from transforms.features.models import load_embedding_model  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--data',
        type=pathlib.Path,
        default=REPO / '..' / 'shared' / 'data' / 'chroma',
        help='Folder of *.md documents (default: ../shared/data/chroma from the repo root).',
    )
    parser.add_argument('--chunk-size', type=int, default=400, help='Tokens per chunk (default 400).')
    parser.add_argument('--batch-size', type=int, default=64, help='Texts per forward pass.')
    parser.add_argument(
        '--model', type=str, default='all-MiniLM-L6-v2', help='Embedding model name or local path.'
    )
    parser.add_argument(
        '--chunkers',
        nargs='+',
        default=[CLUSTER_SEMANTIC, SEMANTIC_BREAKPOINT, RECURSIVE],
        choices=[CLUSTER_SEMANTIC, SEMANTIC_BREAKPOINT, RECURSIVE],
        help='Chunkers to measure.',
    )
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    files = sorted(args.data.glob('*.md'))
    if not files:
        raise SystemExit(f'no *.md files under {args.data}')
    model = load_embedding_model(args.model)
    documents = []
    for path in files:
        text = path.read_text(encoding='utf-8')
        documents.append((path.stem, text, TokenIndex(token_offsets(model.tokenizer, text))))
    total_tokens = sum(len(tokens) for _, _, tokens in documents)
    print(f'{len(documents)} documents, {total_tokens} tokens, chunk_size {args.chunk_size}')

    rows = []
    for name in args.chunkers:
        sizes, per_file, n_pieces, seconds = [], [], 0, 0.0
        for stem, text, tokens in documents:
            started = time.perf_counter()
            if name == RECURSIVE:
                spans = split_recursive(text, tokens, args.chunk_size, 0)
            else:
                spans = semantic_spans(name, text, tokens, model, args.chunk_size, args.batch_size)
            seconds += time.perf_counter() - started
            if name != RECURSIVE:
                # Recounted outside the timing; semantic_spans cuts the same pieces.
                n_pieces += len(piece_spans(text, tokens))
            sizes.extend(tokens.count(s, e) for s, e in spans)
            per_file.append(f'{stem}={len(spans)}')
        rows.append((name, sizes, n_pieces, seconds))
        print(f'  {name}: chunks per file {" ".join(per_file)} ({seconds:.1f} s)', flush=True)

    header = (
        f'{"chunker":<20}{"chunks":>8}{"min":>6}{"median":>8}{"mean":>8}{"p95":>6}{"max":>6}'
        f'{"pieces":>8}{"secs":>8}{"pieces/s":>10}{"chunks/s":>10}'
    )
    print(header)
    print('-' * len(header))
    for name, sizes, n_pieces, seconds in rows:
        s = np.array(sizes)
        pieces = f'{n_pieces:>8}' if n_pieces else f'{"-":>8}'
        rate = f'{n_pieces / seconds:>10.1f}' if n_pieces else f'{"-":>10}'
        print(
            f'{name:<20}{len(s):>8}{s.min():>6}{np.median(s):>8.0f}{s.mean():>8.1f}'
            f'{np.percentile(s, 95):>6.0f}{s.max():>6}{pieces}{seconds:>8.1f}{rate}'
            f'{len(s) / seconds:>10.1f}'
        )


if __name__ == '__main__':
    main()
