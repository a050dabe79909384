"""One chunker of the grid: the build's stages once, then every filter scored on the questions."""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional, Sequence

import numpy as np

from transforms.chunking.chunkers import ChunkerConfig
from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.filters.covered import pooled_vectors
from transforms.dedup.in_memory import apply_filter
from transforms.evaluation import metrics
from transforms.evaluation.datasets import Question
from transforms.evaluation.features import (
    FeatureStore,
    chunk_corpus,
    with_features,
)
from transforms.evaluation.grid import (
    chunker_label,
    grid_needs,
)
from transforms.evaluation.lemmas import LemmaTable
from transforms.query import expand, retrieval
from transforms.query.retriever import Retriever
from transforms.types import Chunk, Document, Dropped

LOG = logging.getLogger('ragsieve.evaluate')

# dense: the study's protocol, exact top-k by cosine; hybrid: the query job's ranking.
DENSE = 'dense'
HYBRID = 'hybrid'
RETRIEVALS = (DENSE, HYBRID)


def apply_filters(
    chunks: Sequence[Chunk], specs: Sequence[FilterSpec], settings: FilterConfig
) -> list[Chunk]:
    """Runs the filters in order through `in_memory.apply_filter`, as the build does; returns the kept chunks.

    Kept chunks carry what the filters changed (intra_doc's boosted salience).
    """
    return filter_in_order(chunks, specs, settings)[0]


def filter_in_order(
    chunks: Sequence[Chunk], specs: Sequence[FilterSpec], settings: FilterConfig
) -> tuple[list[Chunk], list[Dropped]]:
    """`apply_filters`, with every filter's dropped chunks too."""
    kept, dropped = list(chunks), []
    for spec in specs:
        kept, more = apply_filter(kept, spec, settings)
        dropped.extend(more)
    return kept, dropped


def held_rows(chunks: Sequence[Chunk], dropped: Sequence[Dropped]) -> dict[int, list[int]]:
    """`{row of a kept chunk: rows of the covered chunks it holds}` (`query.expand.covered_held`)."""
    row_of = {c.chunk_id: i for i, c in enumerate(chunks)}
    return {row_of[k]: [row_of[c] for c in v] for k, v in expand.covered_held(dropped).items()}


def hit_spans(hits: Sequence[int], chunks: Sequence[Chunk], held: dict[int, list[int]]) -> list[tuple[str, int, int]]:
    """`(doc_id, start, end)` of each hit, grown by the covered chunks it holds (none without `held`)."""
    return [(chunks[r].doc_id, *expand.expanded_span(
        (chunks[r].char_start, chunks[r].char_end),
        [(chunks[h].char_start, chunks[h].char_end) for h in held.get(r, ())])) for r in hits]


def hybrid_top_k(kept_chunks: Sequence[Chunk], kept_rows: np.ndarray, vectors: np.ndarray,
                 questions: Sequence[str], query_vectors: np.ndarray, k: int,
                 config: retrieval.RetrievalConfig = retrieval.RetrievalConfig()) -> list[list[int]]:
    """The query job's ranking over the kept chunks: `Retriever.rank`, over them in memory.

    Args:
      kept_chunks: The chunks a filter kept.
      kept_rows: Their rows in `vectors`.
      vectors: The vectors to index, one row per chunk of the whole corpus.
      questions: The questions' texts (they feed BM25).
      query_vectors: The questions' embeddings.
      k: Chunks per question (fewer when the relevance floor leaves fewer).
      config: The ranking's settings.

    Returns:
      Per question, rows of `vectors`, best first.
    """
    if not len(kept_chunks):
        return [[] for _ in questions]
    retriever = Retriever.of_chunks(kept_chunks, None, config, vectors=vectors[kept_rows])
    row_of = {c.chunk_id: int(r) for c, r in zip(kept_chunks, kept_rows)}
    return [[row_of[h.chunk_id] for h in retriever.rank(q, v, k).hits] for q, v in zip(questions, query_vectors)]


def retrieve(config, chunks, kept_chunks, kept, vectors, questions, query_vectors):
    """The top-k rows of `chunks` for each question among the kept ones (dense or hybrid).

    `config` is the run's `pipelines.evaluate.options.EvaluateConfig` (its `retrieval` and `k`).
    """
    if config.retrieval == HYBRID:
        row_of = {c.chunk_id: i for i, c in enumerate(chunks)}
        kept_rows = np.array([row_of[c.chunk_id] for c in kept_chunks], dtype=np.int64)
        return hybrid_top_k(kept_chunks, kept_rows, vectors, [q.question for q in questions],
                            query_vectors, config.k, config.ranking)
    return retrieval.exact_top_k(vectors, np.flatnonzero(kept), query_vectors, config.k)


def evaluate_chunker(
    chunker: ChunkerConfig,
    documents: Sequence[Document],
    questions: Sequence[Question],
    query_vectors: np.ndarray,
    lemmas: dict[str, LemmaTable],
    config,
    store: FeatureStore,
    progress: Optional[Callable[[int], None]] = None,
) -> tuple[list[dict], dict]:
    """Scores every filter of the grid on one chunker.

    `config` is the run's `pipelines.evaluate.options.EvaluateConfig` (its grid, `k`,
    variants and retrieval); `progress(1)` is called as each filter is scored.

    Returns:
      `(one row per filter and variant, wall seconds per stage)`.
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()
    chunks = chunk_corpus(documents, chunker, store)
    timings['chunk'] = time.perf_counter() - started

    started = time.perf_counter()
    chunks = with_features(chunks, grid_needs(config.filters), store)
    vectors = np.stack([c.embedding for c in chunks]) if chunks else np.zeros((0, 1), np.float32)
    timings['features'] = time.perf_counter() - started

    started = time.perf_counter()
    texts = {d.doc_id: d.text for d in documents}
    tables = {v: metrics.VariantTokens.of(v, chunks, questions, texts, lemmas) for v in config.variants}
    timings['tokens'] = time.perf_counter() - started

    rows = []
    filter_seconds = evaluate_seconds = 0.0
    for grid in config.filters:
        started = time.perf_counter()
        kept_chunks, dropped = filter_in_order(chunks, grid.specs, FilterConfig(features=store.settings))
        filter_seconds += time.perf_counter() - started
        started = time.perf_counter()
        kept_ids = {c.chunk_id for c in kept_chunks}
        kept = np.array([c.chunk_id in kept_ids for c in chunks], dtype=bool)
        held = held_rows(chunks, dropped) if grid.modifiers else {}
        index_vectors = pooled_vectors(vectors, held) if grid.pool else vectors
        retrieved = retrieve(config, chunks, kept_chunks, kept, index_vectors, questions, query_vectors)
        # An expanded hit scores as its grown span: its row and the rows it holds.
        held = held if grid.expand else {}
        char = [metrics.retrieved_char_scores(q.references, q.doc_id, hit_spans(hits, chunks, held))
                for q, hits in zip(questions, retrieved)]
        retrieved = [list(hits) + [h for r in hits for h in held.get(r, ())] for hits in retrieved]
        for variant in config.variants:
            token, oracle = tables[variant].scores(questions, retrieved, kept, config.k)
            rows.append({
                'dataset': config.dataset,
                'chunker': chunker_label(chunker),
                'retrieval': config.retrieval,
                'method': grid.method,
                'filter': grid.name,
                'threshold': '' if grid.threshold is None else grid.threshold,
                'variant': variant,
                'chunks': len(chunks),
                'kept': int(kept.sum()),
                'reduction': metrics.reduction(len(chunks), int(kept.sum())),
                'precision': metrics.mean([s.precision for s in token]),
                'recall': metrics.mean([s.recall for s in token]),
                'iou': metrics.mean([s.iou for s in token]),
                'oracle': metrics.mean(oracle),
                'char_precision': metrics.mean([s.precision for s in char]),
                'char_recall': metrics.mean([s.recall for s in char]),
                'char_iou': metrics.mean([s.iou for s in char]),
            })
        evaluate_seconds += time.perf_counter() - started
        if progress is not None:
            progress(1)
    timings['filter'] = filter_seconds
    timings['score'] = evaluate_seconds
    LOG.info('%s: %d chunks; seconds %s', chunker_label(chunker), len(chunks),
             {k: round(v, 1) for k, v in timings.items()})
    return rows, timings
