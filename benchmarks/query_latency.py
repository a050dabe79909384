"""Query latency against its floor: the query embedding alone.

Builds an index of the Chroma corpora (recursive chunker, --filter none by
default) into a temporary folder, or takes a built one with --index, then
asks the questions of questions_df.csv one at a time through
`Retriever.search`. Prints p50, p95 and p99 per query of each part (query
embedding, search = FAISS dense + BM25 scoring, fusion, dedup) and of the
total, and the ratios total/floor, the floor being the query embedding that
no retrieval can avoid. Loading the index and the model is not counted in
them; it is printed apart, with the process's peak RSS.

    python benchmarks/query_latency.py [--index RUN] [--repeat 3]
"""

import argparse
import csv
import glob
import os
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
PARTS = ('embed', 'search', 'fusion', 'dedup')


def read_questions(path: str, limit: int) -> list[str]:
    with open(path, newline='', encoding='utf-8') as f:
        questions = [row['question'] for row in csv.DictReader(f) if row['question'].strip()]
    return questions[:limit] if limit else questions


def build(data: str, out: str, chunk_size: int, filters: str) -> None:
    from pipelines.build_index import job as build_index

    corpora = sorted(glob.glob(os.path.join(data, '*.md')))
    if not corpora:
        raise SystemExit(f'no *.md corpora under {data}')
    # A glob, so questions_df.csv next to the corpora is not read as input.
    build_index.run(['--input', os.path.join(data, '*.md'), '--output', out,
                     '--chunk_size', str(chunk_size), '--filter', filters])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md) and questions_df.csv.')
    parser.add_argument('--index', type=str, default=None,
                        help='A built index to query; by default one is built into a temp folder.')
    parser.add_argument('--chunk_size', type=int, default=400, help="The temporary build's --chunk_size.")
    parser.add_argument('--filter', type=str, default='none', help="The temporary build's --filter.")
    parser.add_argument('--max_questions', type=int, default=0, help='Ask at most this many (0 = all).')
    parser.add_argument('--k', type=int, default=5, help='Results per query.')
    parser.add_argument('--warmup', type=int, default=3, help='Queries run first and not counted.')
    parser.add_argument('--repeat', type=int, default=1,
                        help='Ask the questions this many times over (more samples for p99).')
    parser.add_argument('--torch_threads', type=int, default=0,
                        help="torch intra-op threads (0 = torch's default). On a machine shared with "
                             'another busy process, 1 thread was ~17x faster for one short query '
                             '(measured: 31 ms vs 530 ms with 2 threads on 2 busy cores).')
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)

    import logging

    from transforms.query.retriever import Retriever

    questions = read_questions(os.path.join(args.data, 'questions_df.csv'), args.max_questions)
    with tempfile.TemporaryDirectory() as tmp:
        index = args.index
        if index is None:
            index = os.path.join(tmp, 'index')
            build(args.data, index, args.chunk_size, args.filter)
        # One dedup line per query would drown the report.
        logging.getLogger('ragsieve.query').setLevel(logging.WARNING)
        import resource
        import time

        started = time.perf_counter()
        retriever = Retriever(index)
        load_seconds = time.perf_counter() - started
        for q in questions[: args.warmup]:
            retriever.search(q, args.k)
        seconds = {p: [] for p in PARTS}
        for q in questions * args.repeat:
            result = retriever.search(q, args.k)
            for p in PARTS:
                seconds[p].append(result.seconds[p])
    times = {p: np.array(v) * 1000 for p, v in seconds.items()}
    total = sum(times.values())
    floor = times['embed']
    import torch

    print(f'{len(questions)} questions x {args.repeat}, {len(retriever.chunk_ids)} chunks, k={args.k}, '
          f'candidates={retriever.config.candidates} per signal, {torch.get_num_threads()} torch threads; '
          f'index and model loaded in {load_seconds:.1f} s, peak RSS '
          f'{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB')
    print(f'{"part":<8} {"p50 ms":>9} {"p95 ms":>9} {"p99 ms":>9}')
    for name, values in [*times.items(), ('total', total)]:
        print(f'{name:<8} ' + ' '.join(f'{np.percentile(values, q):9.2f}' for q in (50, 95, 99)))
    print(f'total/floor (floor = query embedding): p50 {np.percentile(total, 50) / np.percentile(floor, 50):.2f}, '
          f'p95 {np.percentile(total, 95) / np.percentile(floor, 95):.2f}, '
          f'median of per-query ratios {np.median(total / floor):.2f}')


if __name__ == '__main__':
    main()
