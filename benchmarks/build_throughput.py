"""Build throughput against its floor, on the CPU it runs on: each default against a bare encode.

Builds the Chroma corpora with recursive 400/200 on the DirectRunner (no
filter by default: the floor measures the embedding the build cannot avoid),
each build a whole process (`python -m pipelines.build_index`), then encodes
the same chunk texts with `SentenceTransformer.encode` and the same batch
size, model load included: as a plain script does (`bare`: torch's own
kernels, nothing pinned; the floor the targets are against) and once per
kernel mode (`native`, `portable`; `bf16`: `embed_texts` through OpenVINO).
Kernels are fixed per process (transforms/features/kernels.py), so every
build and floor runs in a process of its own, alternating over --repeats
rounds so noise from a shared machine hits all alike; the fastest of each
counts. Prints chunks/s and each build against the bare floor: `native` (the
default build; target <= 1.10), `portable` (the default on Dataflow), `bf16`
(target <= 0.6; with --repeats >= 2 also the first round's, whose OpenVINO
cache is empty, as on a machine's first bf16 build).
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


def build_seconds(args, out: str, setting: str) -> float:
    """One whole build process (`python -m pipelines.build_index`: start, imports, model load included)."""
    precision = 'bf16' if setting == 'bf16' else 'fp32'
    kernels_flag = ['--embed_kernels', setting] if precision == 'fp32' else []
    started = time.perf_counter()
    subprocess.run([
        sys.executable, '-m', 'pipelines.build_index', '--input', os.path.join(args.data, '*.md'), '--output', out,
        '--chunker', 'recursive', '--chunk_size', '400', '--chunk_overlap', '200', '--progress', 'none',
        '--embed_batch_size', str(args.batch_size), '--filter', args.filter, '--embed_precision', precision,
        *kernels_flag,
    ], cwd=REPO, check=True, capture_output=True, env={k: v for k, v in os.environ.items() if k not in _PIN_ENV})
    return time.perf_counter() - started


def main():
    from transforms.features import kernels, openvino_cache

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md).')
    parser.add_argument('--batch_size', type=int, default=64, help='Embedding batch size for both runs.')
    parser.add_argument('--repeats', type=int, default=1, help='Rounds of builds and floors; the fastest counts.')
    parser.add_argument('--filter', type=str, default='none', help='The builds\' --filter.')
    parser.add_argument('--builds', type=str, default='native,portable',
                        help='Builds to time, comma-separated: native (the default build), portable, bf16 '
                             '(--embed_precision bf16; adds a bf16 floor).')
    parser.add_argument('--floor', type=str, default=None, help=argparse.SUPPRESS)  # a floor's own process
    parser.add_argument('--floor_mode', type=str, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        print(encode_floor(args.floor, args.batch_size, args.floor_mode))
        return

    corpora = sorted(glob.glob(os.path.join(args.data, '*.md')))
    if not corpora:
        parser.error(f'no *.md corpora under {args.data}')
    builds = args.builds.split(',')
    if set(builds) - {*kernels.MODES, 'bf16'}:
        parser.error(f'--builds: one of native, portable, bf16, got {args.builds}')
    modes = [BARE, *kernels.MODES] + (['bf16'] if 'bf16' in builds else [])
    build_times, floors = {b: [] for b in builds}, {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = os.path.join(tmp, 'texts.json')
        # This machine's OpenVINO cache starts empty: the first round's bf16 build is a machine's first.
        os.environ[openvino_cache.ENV] = os.path.join(tmp, 'openvino')
        for _ in range(args.repeats):
            for setting in builds:
                out = os.path.join(tmp, setting)
                build_times[setting].append(build_seconds(args, out, setting))
            texts = pq.read_table(os.path.join(tmp, builds[0], 'chunks')).column('text').to_pylist()
            with open(texts_file, 'w') as f:
                json.dump(texts, f)
            for mode in modes:
                floors[mode].append(floor_seconds(texts_file, args.batch_size, mode))

    bare = min(floors[BARE])
    print(f'corpora: {len(corpora)} files, {len(texts)} chunks (recursive 400/200, filter {args.filter}), '
          f'batch {args.batch_size}, on {kernels.cpu_name()}')
    print('runs: ' + ', '.join(f'build {b} {[round(t, 1) for t in ts]} s' for b, ts in build_times.items())
          + ', ' + ', '.join(f'floor {m} {[round(t, 1) for t in ts]} s' for m, ts in floors.items()))
    for mode in modes:
        best = min(floors[mode])
        print(f'floor {mode:8} (load + encode):          {best:7.2f} s  {len(texts) / best:7.1f} chunks/s  '
              f'{best / bare:.3f}x bare')
    for setting, times in build_times.items():
        best = min(times)
        target = '(target <= 0.6)' if setting == 'bf16' else '(target <= 1.10)' if setting == 'native' else ''
        first = f'; first {times[0] / bare:.3f}x (empty OpenVINO cache)' if setting == 'bf16' and len(times) > 1 else ''
        print(f'build {setting:8} (whole process):          {best:7.2f} s  {len(texts) / best:7.1f} chunks/s  '
              f'{best / bare:.3f}x bare {target}{first}')


if __name__ == '__main__':
    main()
