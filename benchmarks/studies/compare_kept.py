"""Kept sets of the lexical filters on the Chroma corpora, to compare two checkouts.

Chunks the Chroma corpora with the study's non-semantic chunkers (the
evaluation's defaults), computes MinHash signatures, and writes, per chunker
and filter, the sorted kept chunk ids of `in_memory.apply_filter` (the evaluation's
in-memory path) as JSON. Run it with PYTHONPATH set to each checkout and diff:

    PYTHONPATH=/work/main python benchmarks/studies/compare_kept.py --out /tmp/main.json
    PYTHONPATH=. python benchmarks/studies/compare_kept.py --out /tmp/branch.json --diff /tmp/main.json
"""

import argparse
import dataclasses
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHUNKERS = ('fixed:200:0', 'fixed:400:0', 'fixed:400:200', 'fixed:800:400',
            'recursive:200:0', 'recursive:400:0', 'recursive:400:200', 'recursive:800:400')
FILTERS = ('exact', 'minhash@0.6', 'minhash@0.7', 'minhash@0.8')


def kept_sets(data: str) -> dict:
    from transformers import AutoTokenizer

    from transforms.chunking.chunk_documents import document_chunks
    from transforms.chunking.chunkers import ChunkerConfig, TokenIndex, chunk_spans, token_offsets
    from transforms.dedup.config import FilterConfig, parse_filters
    from transforms.dedup.in_memory import apply_filter
    from transforms.evaluation.datasets import read_dataset
    from transforms.features.minhash import signatures
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_EMBEDDING_MODEL))
    documents, _, _ = read_dataset('chroma', data)
    tokens = {d.doc_id: TokenIndex(token_offsets(tokenizer, d.text)) for d in documents}
    config = FilterConfig()
    out = {}
    for spec in CHUNKERS:
        name, size, overlap = spec.split(':')
        chunker = ChunkerConfig(name, int(size), int(overlap))
        chunks = [c for d in documents for c in document_chunks(d, chunk_spans(d.text, tokens[d.doc_id], chunker), tokens[d.doc_id])]
        sigs = signatures([c.text for c in chunks], config.features.minhash_config())
        chunks = [dataclasses.replace(c, minhash=s) for c, s in zip(chunks, sigs)]
        for item in FILTERS:
            (filter_spec,) = parse_filters(item)
            kept, _ = apply_filter(chunks, filter_spec, config)
            out[f'{spec} {item}'] = sorted(c.chunk_id for c in kept)
            print(f'{spec} {item}: {len(chunks)} chunks, {len(kept)} kept', flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora.')
    parser.add_argument('--out', type=str, required=True, help='JSON file written.')
    parser.add_argument('--diff', type=str, default=None, help='A previous --out to compare with.')
    args = parser.parse_args()
    result = kept_sets(args.data)
    with open(args.out, 'w') as f:
        json.dump(result, f)
    if args.diff:
        with open(args.diff) as f:
            before = json.load(f)
        for key in sorted(result):
            a, b = set(before.get(key, [])), set(result[key])
            print(f'{key}: {"identical" if a == b else f"-{len(a - b)} +{len(b - a)}: {sorted(a ^ b)[:10]}"}')


if __name__ == '__main__':
    main()
