"""How the hybrid ranking's relevance floor trades found hops against junk, on BEIR-layout sets.

    python benchmarks/studies/relevance_floor.py --sets /tmp/beir/musique /tmp/beir/hotpotqa /tmp/beir/chroma

For each set (chunked `recursive:256:0`, every chunk kept) and each floor
setting, the query job's own ranking (`Retriever.rank`) gives:
- on the set's own queries: nDCG@10, coverage@10 and all-groups@10 (or recall@10);
- on off-topic queries (every other set's queries, whose answers are not in
  this corpus): the mean number of hits in the top 10 and the share of
  queries with any hit: what a floor is there to keep out.
And the cosines of all-MiniLM-L6-v2 it is judged by: of the gold passages
(on-topic) and of the best chunk for an off-topic query.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SETTINGS = (  # (label, min_relevance, floor_exempt_bm25)
    ('none (floor off)', -1.0, 0),
    ('0.25 on every candidate', 0.25, 0),
    ('0.25 unless BM25 top 5 (default)', 0.25, 5),
    ('0.25 unless BM25 top 10', 0.25, 10),
    ('0.25 unless BM25 top 20', 0.25, 20),
    ('0.25 unless BM25 top 50', 0.25, 50),
    ('0.15 on every candidate', 0.15, 0),
    ('0.10 on every candidate', 0.10, 0),
)


def main(argv=None) -> int:
    from transforms.chunking.chunkers import ChunkerConfig
    from transforms.dedup.config import FilterConfig
    from transforms.evaluation import ir_metrics, ir_scoring
    from transforms.evaluation.beir import read_beir
    from transforms.evaluation.features import FeatureStore, chunk_corpus, open_cache, with_features
    from transforms.features import kernels
    from transforms.features.embedding import EmbeddingConfig
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model
    from transforms.output import snapshots
    from transforms.query import retrieval
    from transforms.query.retriever import Retriever
    import logging

    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sets', nargs='+', type=Path, required=True)
    parser.add_argument('--cache', type=str, default='/tmp/evalcache')
    args = parser.parse_args(argv)
    logging.getLogger('ragsieve.query').setLevel(logging.WARNING)

    model = load_embedding_model(DEFAULT_EMBEDDING_MODEL, kernel_mode=kernels.DEFAULT_MODE)
    settings = FilterConfig().features
    sets = {p.name: read_beir(p) for p in args.sets}
    with snapshots.lock(args.cache):
        store = FeatureStore(model, 64, settings, open_cache(
            args.cache, EmbeddingConfig(DEFAULT_EMBEDDING_MODEL, 64, kernels=kernels.DEFAULT_MODE), model,
            settings, set()))
        vectors = {name: store.embed([q.text for q in s.queries]) for name, s in sets.items()}
        chunked = {name: with_features(chunk_corpus(s.documents, ChunkerConfig('recursive', 256, 0), store), set(),
                                       store) for name, s in sets.items()}
        store.save(1 << 30)
    print('| set | floor | nDCG@10 | coverage@10 | all groups@10 | off-topic: hits in top 10 | '
          'off-topic: queries with a hit |')
    print('|---|---|---|---|---|---|---|')
    cosines = {}
    for name, s in sets.items():
        base = Retriever.of_chunks(chunked[name], model)
        off = [(q, v) for other, o in sets.items() if other != name for q, v in zip(o.queries, vectors[other])]
        for label, floor, exempt in SETTINGS:
            config = dataclasses.replace(retrieval.RetrievalConfig(), min_relevance=floor, floor_exempt_bm25=exempt)
            top, deep = ir_scoring.ranked_passages(ir_scoring.HYBRID, base, s.queries, vectors[name], config)
            scores = ir_scoring.score_rankings(s.queries, top, deep)
            searcher = base.with_config(config)
            hits = [len(ir_metrics.documents_of(h.doc_id for h in searcher.rank(q.text, v, 40).hits)[:10])
                    for q, v in off]
            print(f"| {name} | {label} | {scores['ndcg@10']:.4f} | {scores['coverage@10']:.4f} | "
                  f"{scores['all_groups@10']:.4f} | {np.mean(hits):.2f} | {np.mean([h > 0 for h in hits]):.3f} |")
        row_of = {c.doc_id: i for i, c in enumerate(chunked[name])}  # a passage's first chunk
        gold = [float(base.embeddings[row_of[d]] @ v) for q, v in zip(s.queries, vectors[name]) for d in q.relevant]
        best_off = [float(np.max(base.embeddings @ v)) for _, v in off]
        cosines[name] = (gold, best_off)
    print()
    print('| set | gold passages | gold cosine p10 / p50 | gold below 0.25 | off-topic best cosine p50 / p90 / max |')
    print('|---|---|---|---|---|')
    for name, (gold, best_off) in cosines.items():
        print(f'| {name} | {len(gold)} | {np.percentile(gold, 10):.3f} / {np.percentile(gold, 50):.3f} | '
              f'{np.mean(np.array(gold) < 0.25):.3f} | {np.percentile(best_off, 50):.3f} / '
              f'{np.percentile(best_off, 90):.3f} / {np.max(best_off):.3f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
