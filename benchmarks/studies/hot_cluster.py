"""The similarity filter's verification on one hot cluster: time and edges against the cluster size.

N near-identical vectors (one direction plus seeded noise, cosine about 0.99
to each other, as N copies of one boilerplate paragraph embed) all fall in
one candidate cluster. The build's steps for a cluster group then run as in
`similarity.stage.VerifyGroupFn`: `candidates.split_group` (blocks of
`MAX_GROUP` in keep order) and `candidates.verify_block` per block (each
chunk keeps at most `MAX_EARLIER` edges), then `greedy_keep_first` over the
distinct edges. The vectors are synthetic: the unit under test is the
verification, not the model. Without the cap a block of 5,000 copies would
yield 12.5 million edges; with it, edges and time should grow linearly.

    python benchmarks/studies/hot_cluster.py [--sizes 25000,50000,100000]
"""

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def hot_members(n: int, dim: int = 384, noise: float = 0.005, seed: int = 0):
    import numpy as np

    from transforms.dedup.filters.similarity.candidates import SimMember

    rng = np.random.default_rng(seed)
    base = rng.normal(size=dim)
    base /= np.linalg.norm(base)
    vectors = (base + rng.normal(scale=noise, size=(n, dim))).astype(np.float32)
    return [SimMember(f'd{i:07d}#0', (0.0, f'd{i:07d}', 0), v) for i, v in enumerate(vectors)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=str, default='25000,50000,100000', help='Cluster sizes, comma-separated.')
    parser.add_argument('--threshold', type=float, default=0.9, help='The similarity threshold.')
    args = parser.parse_args()
    sys.path.insert(0, REPO)
    from transforms.dedup.filters.similarity import candidates
    from transforms.dedup.greedy import greedy_keep_first

    print('| copies | blocks | verified edges | per chunk | capped chunks | verify s | verify µs/chunk | '
          'greedy s | kept |')
    print('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    for n in [int(s) for s in args.sizes.split(',') if s.strip()]:
        members = hot_members(n)
        started = time.perf_counter()
        edges, capped = set(), 0
        blocks = candidates.split_group(members)
        for block in blocks:
            found, cut = candidates.verify_block(block, args.threshold)
            edges.update(found)
            capped += cut
        verify = time.perf_counter() - started
        started = time.perf_counter()
        dropped = greedy_keep_first(edges)
        greedy = time.perf_counter() - started
        print(f'| {n} | {len(blocks)} | {len(edges)} | {len(edges) / n:.1f} | {capped} | {verify:.1f} | '
              f'{verify / n * 1e6:.0f} | {greedy:.1f} | {n - len(dropped)} |', flush=True)


if __name__ == '__main__':
    main()
