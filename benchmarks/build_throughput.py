"""Build throughput against its floor: the same texts through SentenceTransformer.encode.

Builds the Chroma corpora with recursive 400/200 on the DirectRunner (no
filter by default: the floor measures the embedding the build cannot avoid),
then encodes the same chunk texts with the same batch size, in the same
process, model load included in both. With --repeats the two alternate, so
noise from a shared machine hits both alike; the fastest of each counts.
Prints chunks/s for both and the time ratio build/floor (target <= 1.10).
"""

import argparse
import glob
import os
import tempfile
import time

import pyarrow.parquet as pq

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md).')
    parser.add_argument('--batch_size', type=int, default=64, help='Embedding batch size for both runs.')
    parser.add_argument('--repeats', type=int, default=1, help='Runs of each; the fastest counts.')
    parser.add_argument('--filter', type=str, default='none', help='The build\'s --filter.')
    args = parser.parse_args()

    from pipelines import build_index
    from transforms.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    corpora = sorted(glob.glob(os.path.join(args.data, '*.md')))
    if not corpora:
        parser.error(f'no *.md corpora under {args.data}')
    build_times, floor_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'out')
        for _ in range(args.repeats):
            started = time.perf_counter()
            build_index.run([
                '--input', os.path.join(args.data, '*.md'), '--output', out,
                '--chunker', 'recursive', '--chunk_size', '400', '--chunk_overlap', '200',
                '--embed_batch_size', str(args.batch_size), '--filter', args.filter,
            ])
            build_times.append(time.perf_counter() - started)
            texts = pq.read_table(os.path.join(out, 'chunks')).column('text').to_pylist()
            started = time.perf_counter()
            model = load_embedding_model(DEFAULT_EMBEDDING_MODEL)
            model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)
            floor_times.append(time.perf_counter() - started)
            del model

    build, floor = min(build_times), min(floor_times)
    print(f'corpora: {len(corpora)} files, {len(texts)} chunks (recursive 400/200, filter {args.filter}), '
          f'batch {args.batch_size}')
    print(f'runs: build {[round(t, 1) for t in build_times]} s, floor {[round(t, 1) for t in floor_times]} s')
    print(f'build (whole pipeline, DirectRunner): {build:7.2f} s  {len(texts) / build:7.1f} chunks/s')
    print(f'floor (model load + encode only):     {floor:7.2f} s  {len(texts) / floor:7.1f} chunks/s')
    print(f'ratio build/floor: {build / floor:.3f}  (target <= 1.10)')


if __name__ == '__main__':
    main()
