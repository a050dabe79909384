"""One chunker on an IR set (BEIR layout): dense, BM25 and hybrid rankings of passages, per filter.

A passage (BEIR "document") is chunked like any document; a ranking of
chunks becomes a ranking of passages by each passage's best chunk
(`ir_metrics.documents_of`), as max-passage retrieval does. The three
retrievals search the chunks a filter kept:

- `dense`: exact top-k by cosine (FAISS inner product over normalized vectors);
- `bm25`: the build's BM25 (`output.bm25.build_bm25`) alone;
- `hybrid`: the query job's own ranking, `Retriever.rank` over the kept
  chunks in memory (fusion of dense and BM25, salience and recency as tie-break;
  post-ranking dedup), with the run's `RetrievalConfig`.

The @10 metrics come from the ranking with the configuration as given;
recall@100 from the same ranking run deeper, with as many candidates per
signal as dense and BM25 alone rank for it (`CHUNKS_PER_PLACE * DEEP`
chunks), so the fusion sees every passage either single signal would
return in its top 100.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Optional, Sequence

import numpy as np

from transforms.chunking.chunkers import ChunkerConfig
from transforms.dedup.config import FilterConfig
from transforms.evaluation import ir_metrics, metrics
from transforms.evaluation.beir import Query
from transforms.evaluation.features import FeatureStore, chunk_corpus, with_features
from transforms.evaluation.grid import chunker_label, grid_needs
from transforms.evaluation.scoring import filter_in_order
from transforms.output.bm25 import bm25_tokenize
from transforms.query import retrieval
from transforms.query.retriever import Retriever
from transforms.types import Document

LOG = logging.getLogger('ragsieve.evaluate')

DENSE = 'dense'
BM25 = 'bm25'
HYBRID = 'hybrid'
IR_RETRIEVALS = (DENSE, BM25, HYBRID)
TOP = 10
DEEP = 100
# Chunks ranked per passage place wanted: a passage longer than one chunk takes several.
CHUNKS_PER_PLACE = 4
METRIC_COLUMNS = ('ndcg@10', 'recall@10', 'recall@100', 'mrr@10')
GROUP_COLUMNS = ('coverage@10', 'all_groups@10')


def _passages(chunk_rows: Sequence[int], doc_ids: Sequence[str], query: Query, depth: int) -> list[str]:
    return ir_metrics.documents_of((doc_ids[r] for r in chunk_rows), exclude=query.query_id)[:depth]


def ranked_passages(kind: str, retriever: Retriever, queries: Sequence[Query], query_vectors: np.ndarray,
                    config: retrieval.RetrievalConfig) -> tuple[list[list[str]], list[list[str]]]:
    """Per query, the top-10 and top-100 passages of one retrieval over the retriever's chunks.

    Args:
      kind: `dense`, `bm25` or `hybrid`.
      retriever: `Retriever.of_chunks` of the kept chunks.
      queries: The queries.
      query_vectors: Their embeddings.
      config: The hybrid ranking's settings.

    Returns:
      `(top 10 per query, top 100 per query)`.
    """
    doc_ids = retriever.doc_ids
    n = len(doc_ids)
    if kind == HYBRID:
        top, deep = [], []
        retrievers = ((TOP, retriever.with_config(config)),
                      (DEEP, retriever.with_config(dataclasses.replace(
                          config, candidates=max(config.candidates, CHUNKS_PER_PLACE * DEEP)))))
        row_of = {c: i for i, c in enumerate(retriever.chunk_ids)}
        for query, vector in zip(queries, query_vectors):
            for (depth, searcher), out in zip(retrievers, (top, deep)):
                hits = searcher.rank(query.text, vector, CHUNKS_PER_PLACE * depth).hits
                out.append(_passages([row_of[h.chunk_id] for h in hits], doc_ids, query, depth))
        return top, deep
    want = min(n, CHUNKS_PER_PLACE * DEEP)
    if kind == DENSE:
        _, found = retriever.faiss.search(np.ascontiguousarray(query_vectors, np.float32), want)
        rows = [[int(r) for r in hits if r >= 0] for hits in found]
    elif kind == BM25:
        tokens = bm25_tokenize([q.text for q in queries], retriever.bm25_tokenizer, return_ids=False)
        rows = [retrieval.top_n(retrieval.bm25_scores(retriever.bm25, t, n), want, min_score=0.0) for t in tokens]
    else:
        raise ValueError(f'unknown retrieval {kind!r}; choose among {list(IR_RETRIEVALS)}')
    return ([_passages(r, doc_ids, q, TOP) for r, q in zip(rows, queries)],
            [_passages(r, doc_ids, q, DEEP) for r, q in zip(rows, queries)])


def score_rankings(queries: Sequence[Query], top: Sequence[Sequence[str]], deep: Sequence[Sequence[str]]) -> dict:
    """Mean metrics over the queries; the group ones only when the set groups its passages."""
    scores = {
        'ndcg@10': metrics.mean([ir_metrics.ndcg_at(t, q.relevant, TOP) for q, t in zip(queries, top)]),
        'recall@10': metrics.mean([ir_metrics.recall_at(t, q.relevant, TOP) for q, t in zip(queries, top)]),
        'recall@100': metrics.mean([ir_metrics.recall_at(d, q.relevant, DEEP) for q, d in zip(queries, deep)]),
        'mrr@10': metrics.mean([ir_metrics.mrr_at(t, q.relevant, TOP) for q, t in zip(queries, top)]),
    }
    grouped = [(q, t) for q, t in zip(queries, top) if q.groups]
    if grouped:
        scores['coverage@10'] = metrics.mean([ir_metrics.group_coverage_at(t, q.groups, TOP) for q, t in grouped])
        scores['all_groups@10'] = metrics.mean([ir_metrics.all_groups_at(t, q.groups, TOP) for q, t in grouped])
    return scores


def evaluate_ir_chunker(chunker: ChunkerConfig, documents: Sequence[Document], queries: Sequence[Query],
                        query_vectors: np.ndarray, config, store: FeatureStore,
                        progress: Optional[Callable[[int], None]] = None) -> tuple[list[dict], dict]:
    """Scores every filter of the grid and every retrieval on one chunker.

    `config` is the run's `pipelines.evaluate.options.EvaluateConfig` (its grid,
    retrievals and `ranking`, the hybrid's `RetrievalConfig`); `progress(1)`
    is called as each filter is scored.

    Returns:
      `(one row per filter and retrieval, wall seconds per stage)`.
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()
    chunks = with_features(chunk_corpus(documents, chunker, store), grid_needs(config.filters), store)
    timings['chunk_and_features'] = time.perf_counter() - started
    rows = []
    for grid in config.filters:
        started = time.perf_counter()
        kept, _ = filter_in_order(chunks, grid.specs, FilterConfig(features=store.settings))
        retriever = Retriever.of_chunks(kept, store.model, config.ranking)
        for kind in config.retrievals:
            top, deep = ranked_passages(kind, retriever, queries, query_vectors, config.ranking)
            rows.append({
                'dataset': config.dataset, 'chunker': chunker_label(chunker), 'retrieval': kind,
                'method': grid.method, 'filter': grid.name,
                'passages': len(documents), 'chunks': len(chunks), 'kept': len(kept),
                'reduction': metrics.reduction(len(chunks), len(kept)),
                **score_rankings(queries, top, deep),
            })
        timings[f'filter_{grid.name}'] = time.perf_counter() - started
        if progress is not None:
            progress(1)
    LOG.info('%s: %d chunks; seconds %s', chunker_label(chunker), len(chunks),
             {k: round(v, 1) for k, v in timings.items()})
    return rows, timings
