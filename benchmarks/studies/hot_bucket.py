"""The minhash filter on one hot LSH bucket: time against bucket size.

One boilerplate paragraph repeated N times with one word changed in each copy
(a different word position and replacement per copy) puts N near-duplicates
in the same LSH buckets. Signatures are computed first (timed apart); then
the minhash filter (`filters.minhash.drop_minhash_groups`: the same band
keys, `bucket_edges` and `minhash_keepers` the build's DropNearDuplicates
runs) is timed. Verification is O(n) per bucket, so time per chunk should stay flat.

    python benchmarks/studies/hot_bucket.py [--sizes 25000,50000,100000]
"""

import argparse
import time

PARAGRAPH = (
    'This website uses cookies to improve your experience while you navigate through the website. '
    'Out of these cookies, the cookies that are categorized as necessary are stored on your browser '
    'as they are essential for the working of basic functionalities of the website. We also use '
    'third-party cookies that help us analyze and understand how you use this website.'
)


def hot_texts(n: int) -> list[str]:
    words = PARAGRAPH.split()
    out = []
    for i in range(n):
        copy = list(words)
        copy[i % len(words)] = f'word{i}'
        out.append(' '.join(copy))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=str, default='25000,50000,100000', help='Bucket sizes, comma-separated.')
    parser.add_argument('--threshold', type=float, default=0.8, help='The minhash threshold.')
    args = parser.parse_args()

    from transforms.dedup.filters.minhash.decision import drop_minhash_groups
    from transforms.features.minhash import MinHashConfig, signatures
    from transforms.text import content_hash
    from transforms.types import Chunk

    print('| copies | signatures s | filter s | filter µs/chunk | kept |')
    print('| ---: | ---: | ---: | ---: | ---: |')
    for n in [int(x) for x in args.sizes.split(',')]:
        texts = hot_texts(n)
        started = time.perf_counter()
        sigs = signatures(texts, MinHashConfig())
        sig_s = time.perf_counter() - started
        chunks = [Chunk(chunk_id=f'd{i:06d}#0', doc_id=f'd{i:06d}', chunk_index=0, text=t, char_start=0,
                        char_end=len(t), n_tokens=len(t.split()), content_hash=content_hash(t), minhash=s)
                  for i, (t, s) in enumerate(zip(texts, sigs))]
        started = time.perf_counter()
        kept, dropped = drop_minhash_groups(chunks, args.threshold)
        filter_s = time.perf_counter() - started
        print(f'| {n} | {sig_s:.1f} | {filter_s:.1f} | {filter_s / n * 1e6:.0f} | {len(kept)} |', flush=True)


if __name__ == '__main__':
    main()
