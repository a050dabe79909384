"""Build throughput against its floor, on the CPU it runs on: each default against a bare encode.

Builds the Chroma corpora with recursive 400/200 on the DirectRunner (no
filter by default: the floor measures the embedding the build cannot avoid),
each build a whole process (`python -m pipelines.build_index`), then encodes
the same chunk texts with `SentenceTransformer.encode` and the same batch
size, model load included: as a plain script does (`bare`: torch's own
kernels, nothing pinned; the floor the targets are against) and once per
setting the builds use (`native`, `portable`; `openvino`: `embed_texts`
through OpenVINO in fp32; `bf16`: the same in bf16; `int8`: the graph
quantized by NNCF on the shipped calibration set). Kernels are fixed per
process (transforms/features/kernels.py), so every build and floor runs in a
process of its own, alternating over --repeats rounds so noise from a shared
machine hits all alike; the fastest of each counts. Prints chunks/s and each
build against the bare floor: `default` (no embedding flag: the faster
kernels of this CPU's family, `kernels.FASTEST`, on its faster fp32 backend,
`precision.FASTEST_FP32`; target <= 1.00), `native`,
`portable` (the default on Dataflow), `openvino` (--embed_backend openvino,
fp32), `bf16` (target <= 0.6), `int8` (target <= 0.45). With --repeats >= 2
OpenVINO builds also show the first round's, whose OpenVINO cache is empty
(int8: the model is quantized there), as on a machine's first such build.
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
# The build without --embed_kernels, and the two settings that run on OpenVINO.
DEFAULT, OPENVINO, BF16, INT8 = 'default', 'openvino', 'bf16', 'int8'
SETTINGS = (DEFAULT, 'native', 'portable', OPENVINO, BF16, INT8)
# The flags that make each build setting.
_FLAGS = {DEFAULT: [], 'native': ['--embed_kernels', 'native'], 'portable': ['--embed_kernels', 'portable'],
          OPENVINO: ['--embed_backend', 'openvino'], BF16: ['--embed_precision', 'bf16'],
          INT8: ['--embed_precision', 'int8']}
# Targets against the bare floor (bf16's on CPUs with bf16 units, int8's on CPUs with VNNI: the only ones that run them).
_TARGETS = {DEFAULT: 1.00, BF16: 0.6, INT8: 0.45}


def floor_of(setting: str) -> str:
    """The floor a build setting is compared with beside the bare one: its own kernels or OpenVINO precision.

    The default build's is what a build naming no embedding flag runs on this CPU: its family's fastest fp32
    backend (`precision.fastest_fp32_backend`), OpenVINO or torch with the family's kernels.
    """
    from transforms.features import kernels, precision

    if setting != DEFAULT:
        return setting
    return OPENVINO if precision.fastest_fp32_backend(kernels.DEFAULT_MODE) == precision.OPENVINO \
        else kernels.DEFAULT_MODE


def floor_seconds(texts_file: str, batch_size: int, mode: str) -> float:
    """Model load + encode of the texts in a fresh process running `mode`'s kernels (or `bf16`, `bare`)."""
    env = {k: v for k, v in os.environ.items() if mode != BARE or k not in _PIN_ENV}
    done = subprocess.run([sys.executable, __file__, '--floor', texts_file, '--batch_size', str(batch_size),
                           '--floor_mode', mode], capture_output=True, text=True, check=True, env=env)
    return float(done.stdout.strip().splitlines()[-1])


def encode_floor(texts_file: str, batch_size: int, mode: str) -> float:
    from transforms.features import openvino_model, precision
    from transforms.features.embedding import embed_texts
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model, resolve_model_path

    texts = json.loads(open(texts_file).read())
    started = time.perf_counter()
    if mode == BARE:
        from sentence_transformers import SentenceTransformer

        SentenceTransformer(resolve_model_path(DEFAULT_EMBEDDING_MODEL), device='cpu').encode(
            texts, batch_size=batch_size, normalize_embeddings=True)
    elif mode in (OPENVINO, BF16, INT8):  # the model on OpenVINO, loaded as builds load it (`openvino_model`)
        model = openvino_model.load(DEFAULT_EMBEDDING_MODEL, precision.FP32 if mode == OPENVINO else mode)
        embed_texts(model, texts, batch_size)
    else:
        model = load_embedding_model(DEFAULT_EMBEDDING_MODEL, kernel_mode=mode)
        model.encode(texts, batch_size=batch_size, normalize_embeddings=True)
    return time.perf_counter() - started


def build_seconds(args, out: str, setting: str) -> float:
    """One whole build process (`python -m pipelines.build_index`: start, imports, model load included)."""
    started = time.perf_counter()
    subprocess.run([
        sys.executable, '-m', 'pipelines.build_index', '--input', os.path.join(args.data, '*.md'), '--output', out,
        '--chunker', 'recursive', '--chunk_size', '400', '--chunk_overlap', '200', '--progress', 'none',
        '--embed_batch_size', str(args.batch_size), '--filter', args.filter, *_FLAGS[setting],
    ], cwd=REPO, check=True, capture_output=True, env={k: v for k, v in os.environ.items() if k not in _PIN_ENV})
    return time.perf_counter() - started


def main():
    from transforms.features import kernels, openvino_cache, precision

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md).')
    parser.add_argument('--batch_size', type=int, default=64, help='Embedding batch size for both runs.')
    parser.add_argument('--repeats', type=int, default=1, help='Rounds of builds and floors; the fastest counts.')
    parser.add_argument('--filter', type=str, default='none', help='The builds\' --filter.')
    parser.add_argument('--builds', type=str, default='default,native,portable,openvino',
                        help='Builds to time, comma-separated, of ' + ', '.join(SETTINGS) + ': default (no '
                             '--embed_kernels), native, portable (--embed_kernels), openvino (--embed_backend '
                             'openvino), bf16, int8 (--embed_precision). Each adds the floor of its setting.')
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
    if set(builds) - set(SETTINGS):
        parser.error(f'--builds: of {", ".join(SETTINGS)}, got {args.builds}')
    modes = [BARE] + sorted({floor_of(b) for b in builds}, key=SETTINGS.index)
    build_times, floors = {b: [] for b in builds}, {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = os.path.join(tmp, 'texts.json')
        # This machine's OpenVINO cache starts empty: the first round's OpenVINO builds are a machine's first.
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
          f'batch {args.batch_size}, on {kernels.cpu_name()}, {kernels.cpu_vendor()}: default kernels '
          f'{kernels.DEFAULT_MODE}, default fp32 backend {precision.fastest_fp32_backend(kernels.DEFAULT_MODE)}')
    print('runs: ' + ', '.join(f'build {b} {[round(t, 1) for t in ts]} s' for b, ts in build_times.items())
          + ', ' + ', '.join(f'floor {m} {[round(t, 1) for t in ts]} s' for m, ts in floors.items()))
    for mode in modes:
        best = min(floors[mode])
        print(f'floor {mode:8} (load + encode):          {best:7.2f} s  {len(texts) / best:7.1f} chunks/s  '
              f'{best / bare:.3f}x bare')
    for setting, times in build_times.items():
        best = min(times)
        target = f'(target <= {_TARGETS[setting]:.2f})' if setting in _TARGETS else ''
        first = (f'; first {times[0] / bare:.3f}x (empty OpenVINO cache)'
                 if setting in (OPENVINO, BF16, INT8) and len(times) > 1 else '')
        print(f'build {setting:8} (whole process):          {best:7.2f} s  {len(texts) / best:7.1f} chunks/s  '
              f'{best / bare:.3f}x bare {target}{first}')


if __name__ == '__main__':
    main()
