"""Candidate recall of the corpus-wide filters against exact all-pairs comparison.

Chunks the Chroma corpora (recursive 400/200 by default), then for each
threshold compares the pairs the filters' candidate generation finds with
every pair that truly passes:
- minhash: pairs sharing an LSH band key vs all pairs with estimated
  Jaccard >= threshold (numpy, all pairs);
- similarity: FAISS range search (filters.similarity.similar_pairs, the
  evaluation's path) and the build's cluster candidates (transforms.candidates:
  seeded KMeans, pairs within each chunk's nearest clusters) vs all pairs with
  cosine >= threshold (numpy, all pairs; needs the embeddings, --similarity).
  The cluster candidates are measured at the build's cluster size and at
  smaller ones (--cluster_sizes): a corpus of a few thousand chunks has only
  a few clusters at the default size, so smaller sizes are what tests the
  probes.
Prints recall = found true pairs / true pairs, and candidates per true pair.
"""

import argparse
import glob
import os
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def chunk_texts(paths, chunker, size, overlap, tokenizer):
    from transforms.chunking.chunkers import ChunkerConfig, TokenIndex, chunk_spans, token_offsets

    config = ChunkerConfig(chunker, size, overlap)
    texts = []
    for path in paths:
        text = open(path, encoding='utf-8').read()
        tokens = TokenIndex(token_offsets(tokenizer, text))
        texts.extend(text[s:e] for s, e in chunk_spans(text, tokens, config))
    return texts


def true_pairs(scores: np.ndarray, threshold: float) -> set:
    rows, cols = np.nonzero(np.triu(scores >= threshold, k=1))
    return set(zip(rows.tolist(), cols.tolist()))


def minhash_recall(texts, thresholds):
    from transforms.dedup.filters.minhash.decision import candidate_pairs_from_buckets
    from transforms.features.minhash import MinHashConfig, band_keys, lsh_bands, signatures

    started = time.perf_counter()
    sigs = signatures(texts, MinHashConfig())
    print(f'minhash signatures: {len(texts) / (time.perf_counter() - started):.0f} chunks/s')
    n = len(texts)
    # All-pairs estimated Jaccard, in row blocks to bound memory.
    jaccard = np.zeros((n, n), dtype=np.float32)
    for s in range(0, n, 256):
        jaccard[s : s + 256] = (sigs[s : s + 256, None, :] == sigs[None, :, :]).mean(axis=2)
    for threshold in thresholds:
        b, r = lsh_bands(threshold, sigs.shape[1])
        buckets = {}
        for i, sig in enumerate(sigs):
            for key in band_keys(sig, b, r):
                buckets.setdefault(key, []).append(i)
        candidates = {tuple(sorted(p)) for p in candidate_pairs_from_buckets(buckets.values())}
        truth = true_pairs(jaccard, threshold)
        recall = len(truth & candidates) / len(truth) if truth else 1.0
        print(f'minhash@{threshold}: bands={b} rows={r} true pairs={len(truth)} '
              f'candidates={len(candidates)} recall={recall:.4f}')


def cluster_candidates(vectors, cluster_size, probes):
    from transforms.dedup.filters.similarity import candidates

    centroids = candidates.train_clusters(vectors, len(vectors), 0, cluster_size)
    nearest = candidates.nearest_clusters(centroids, vectors, probes)
    groups = {}
    for i, clusters in enumerate(nearest.tolist()):
        for c in clusters:
            groups.setdefault(c, []).append(i)
    pairs = set()
    for members in groups.values():
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                pairs.add((members[x], members[y]))
    k = 1 if centroids is None else centroids.shape[0]
    return k, pairs


def similarity_recall(texts, thresholds, cluster_sizes, probes):
    from transforms.dedup.filters.similarity.decision import similar_pairs
    from transforms.features.embedding import embed_texts
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    vectors = embed_texts(load_embedding_model(DEFAULT_EMBEDDING_MODEL), texts)
    cosine = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    for threshold in thresholds:
        found = {(i, j) for i, row in enumerate(similar_pairs(vectors, threshold)) for j, _ in row if i < j}
        truth = true_pairs(cosine, threshold)
        recall = len(truth & found) / len(truth) if truth else 1.0
        print(f'similarity@{threshold}: true pairs={len(truth)} found={len(found)} recall={recall:.4f}')
        for size in cluster_sizes:
            for p in probes:
                k, pairs = cluster_candidates(vectors, size, p)
                hit = len(truth & pairs) / len(truth) if truth else 1.0
                print(f'similarity@{threshold} clusters: size={size} k={k} probes={p} '
                      f'candidates={len(pairs)} ({len(pairs) / max(1, len(texts) * (len(texts) - 1) // 2):.3f} '
                      f'of all pairs) recall={hit:.4f}', flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md).')
    parser.add_argument('--chunker', type=str, default='recursive', help='fixed or recursive.')
    parser.add_argument('--chunk_size', type=int, default=400, help='Tokens per chunk.')
    parser.add_argument('--chunk_overlap', type=int, default=200, help='Overlap in tokens.')
    parser.add_argument('--similarity', action='store_true', help='Also embed and check similarity.')
    parser.add_argument('--cluster_sizes', type=str, default='500,100,50',
                        help='Chunks per cluster of the build\'s candidate clustering, comma-separated.')
    parser.add_argument('--probes', type=str, default='3,2', help='Nearest clusters per chunk, comma-separated.')
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, resolve_model_path

    paths = sorted(glob.glob(os.path.join(args.data, '*.md')))
    if not paths:
        parser.error(f'no *.md corpora under {args.data}')
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_EMBEDDING_MODEL))
    texts = chunk_texts(paths, args.chunker, args.chunk_size, args.chunk_overlap, tokenizer)
    print(f'{len(texts)} chunks ({args.chunker} {args.chunk_size}/{args.chunk_overlap}), '
          f'{len(texts) * (len(texts) - 1) // 2} pairs')
    minhash_recall(texts, [0.6, 0.7, 0.8])
    if args.similarity:
        similarity_recall(texts, [0.8, 0.9], [int(x) for x in args.cluster_sizes.split(',')],
                          [int(x) for x in args.probes.split(',')])


if __name__ == '__main__':
    main()
