"""Build throughput against its floor, and what byte-stable kernels cost.

Builds the Chroma corpora with recursive 400/200 on the DirectRunner (no
filter by default: the floor measures the embedding the build cannot avoid),
then encodes the same chunk texts with `SentenceTransformer.encode` and the
same batch size, model load included. Kernels are fixed per process (see
transforms/kernels.py), so each floor runs in a process of its own, once with
the build's kernels and once with each other mode, alternating with the
build over --repeats rounds, so noise from a shared machine hits all alike;
the fastest of each counts. Prints chunks/s, the ratio build/floor (target
<= 1.10) and each mode's floor against `native` (the cost of portable).
With `--embed_precision bf16` the build runs in bf16 and a bf16 floor
(`embed_texts` through OpenVINO) runs too; the ratio against the fp32
portable floor is the one to read (target <= 0.5).
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


# The floor a user compares with: a plain sentence-transformers script, torch's own kernels, nothing pinned.
BARE = 'bare'
# What pins the kernels (`kernels.pin`); a bare floor's process starts without them.
_PIN_ENV = ('MKL_CBWR', 'MKL_ENABLE_INSTRUCTIONS', 'ATEN_CPU_CAPABILITY', 'ONEDNN_MAX_CPU_ISA')


def floor_seconds(texts_file: str, batch_size: int, mode: str) -> float:
    """Model load + encode of the texts in a fresh process running `mode`'s kernels (or `bf16`, `bare`)."""
    env = {k: v for k, v in os.environ.items() if mode != BARE or k not in _PIN_ENV}
    done = subprocess.run([sys.executable, __file__, '--floor', texts_file, '--batch_size', str(batch_size),
                           '--floor_mode', mode], capture_output=True, text=True, check=True, env=env)
    return float(done.stdout.strip().splitlines()[-1])


def encode_floor(texts_file: str, batch_size: int, mode: str) -> float:
    from transforms.features import precision
    from transforms.features.embedding import embed_texts
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model, resolve_model_path

    texts = json.loads(open(texts_file).read())
    started = time.perf_counter()
    if mode == BARE:
        from sentence_transformers import SentenceTransformer

        SentenceTransformer(resolve_model_path(DEFAULT_EMBEDDING_MODEL), device='cpu').encode(
            texts, batch_size=batch_size, normalize_embeddings=True)
    elif mode == precision.BF16:  # the same model through OpenVINO, its transformer compiled at load
        model = precision.set_precision(load_embedding_model(DEFAULT_EMBEDDING_MODEL, kernel_mode='native'), mode)
        embed_texts(model, texts, batch_size)
    else:
        model = load_embedding_model(DEFAULT_EMBEDDING_MODEL, kernel_mode=mode)
        model.encode(texts, batch_size=batch_size, normalize_embeddings=True)
    return time.perf_counter() - started


def main():
    from transforms.features import kernels

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md).')
    parser.add_argument('--batch_size', type=int, default=64, help='Embedding batch size for both runs.')
    parser.add_argument('--repeats', type=int, default=1, help='Rounds of build and floors; the fastest counts.')
    parser.add_argument('--filter', type=str, default='none', help='The build\'s --filter.')
    parser.add_argument('--embed_kernels', type=str, default=kernels.DEFAULT_MODE, choices=kernels.MODES,
                        help='The build\'s --embed_kernels.')
    parser.add_argument('--embed_precision', type=str, default='fp32', choices=('fp32', 'bf16'),
                        help='The build\'s --embed_precision; bf16 adds a bf16 floor.')
    parser.add_argument('--floor', type=str, default=None, help=argparse.SUPPRESS)  # a floor's own process
    parser.add_argument('--floor_mode', type=str, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        print(encode_floor(args.floor, args.batch_size, args.floor_mode))
        return

    from pipelines.build_index import job as build_index

    corpora = sorted(glob.glob(os.path.join(args.data, '*.md')))
    if not corpora:
        parser.error(f'no *.md corpora under {args.data}')
    modes = [args.embed_kernels] + [m for m in kernels.MODES if m != args.embed_kernels] + [BARE]
    if args.embed_precision != 'fp32':
        modes = [kernels.PORTABLE, kernels.NATIVE, BARE, args.embed_precision]
    build_times, floors = [], {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        out, texts_file = os.path.join(tmp, 'out'), os.path.join(tmp, 'texts.json')
        for _ in range(args.repeats):
            started = time.perf_counter()
            build_index.run([
                '--input', os.path.join(args.data, '*.md'), '--output', out,
                '--chunker', 'recursive', '--chunk_size', '400', '--chunk_overlap', '200',
                '--embed_batch_size', str(args.batch_size), '--filter', args.filter,
                '--embed_kernels', args.embed_kernels, '--embed_precision', args.embed_precision,
            ])
            build_times.append(time.perf_counter() - started)
            texts = pq.read_table(os.path.join(out, 'chunks')).column('text').to_pylist()
            with open(texts_file, 'w') as f:
                json.dump(texts, f)
            for mode in modes:
                floors[mode].append(floor_seconds(texts_file, args.batch_size, mode))

    build = min(build_times)
    floor = min(floors[args.embed_kernels if args.embed_precision == 'fp32' else kernels.PORTABLE])
    print(f'corpora: {len(corpora)} files, {len(texts)} chunks (recursive 400/200, filter {args.filter}), '
          f'batch {args.batch_size}, kernels {args.embed_kernels if args.embed_precision == "fp32" else "native"}, '
          f'precision {args.embed_precision} '
          f'on {kernels.cpu_name()}')
    print(f'runs: build {[round(t, 1) for t in build_times]} s, '
          + ', '.join(f'floor {m} {[round(t, 1) for t in ts]} s' for m, ts in floors.items()))
    print(f'build (whole pipeline, DirectRunner): {build:7.2f} s  {len(texts) / build:7.1f} chunks/s')
    for mode in modes:
        best = min(floors[mode])
        print(f'floor {mode:8} (load + encode):      {best:7.2f} s  {len(texts) / best:7.1f} chunks/s  '
              f'{best / min(floors[kernels.NATIVE]):.3f}x native')
    if args.embed_precision == 'fp32':
        print(f'ratio build/floor ({args.embed_kernels}): {build / floor:.3f}  (target <= 1.10)')
    else:
        print(f'ratio build ({args.embed_precision})/floor (fp32 portable): {build / floor:.3f}  (target <= 0.5); '
              f'build/floor ({args.embed_precision}): {build / min(floors[args.embed_precision]):.3f}')


if __name__ == '__main__':
    main()
