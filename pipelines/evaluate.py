"""Evaluation job: the chunk-filtering study's grid (chunkers x filters) scored on a QA dataset.

This job runs in one process and calls the pure functions of `transforms/`
directly; it is not a Beam pipeline. The grid chunks, embeds and computes the
filter features (entities, MinHash, topics) once per chunker and then scores
17 filters that only *select subsets* of those chunks: as a Beam pipeline
each subset would re-run or re-materialize the whole chain, while in process
a filter costs one pass of its `dedup` function and one exact FAISS search.
The build job (`build_index.py`) is where the same functions run at scale.

Protocol (study Section 3.6): one index holds the chunks of every document
of the dataset; each question retrieves the exact top-k (cosine) among the
chunks a filter kept. Only retrieved chunks of the question's own document
can hit its reference; chunks of other documents still count as retrieved
text, as in the Chroma chunking study's evaluation (one collection for all
corpora, queried without a corpus filter). See `transforms/metrics.py`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import csv
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from pipelines import snapshots
from transforms import dedup, feature_cache, filters, metrics, retrieval
from transforms.chunk_documents import document_chunks
from transforms.chunking import CHUNKERS, ChunkerConfig, TokenIndex, chunk_spans, token_offsets
from transforms.datasets import CHROMA, DATASETS, Question, read_dataset, sample_questions
from transforms.embedding import embed_texts
from transforms.entities import extract_entities, load_ner, model_meta
from transforms.minhash import signatures
from transforms.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model
from transforms.semantic_chunking import semantic_spans
from transforms.text import text_key
from transforms.types import Chunk, Document

LOG = logging.getLogger('ragsieve.evaluate')

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHROMA_DATA = REPO_ROOT.parent / 'shared' / 'data' / 'chroma'


def default_cache() -> Path:
    """Where a grid run keeps embeddings and entities for the next: the user's cache folder."""
    return Path(os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache') / 'ragsieve' / 'evaluate'

# The study's grid (Section 3.3 and Tables 1-10).
DEFAULT_CHUNKERS = (
    'fixed:200:0,fixed:400:0,fixed:400:200,fixed:800:400,'
    'recursive:200:0,recursive:400:0,recursive:400:200,recursive:800:400,'
    'cluster_semantic:400,semantic_breakpoint:400'
)
DEFAULT_FILTERS = (
    'none,exact,minhash@0.6,minhash@0.7,minhash@0.8,'
    'random@0.2,random@0.4,random@0.6,random@0.8,'
    'similarity@0.8,similarity_topics@0.8,similarity_ner@0.8,similarity_topics_ner@0.8,'
    'ner_exact,ner_half,intra_doc,cascade'
)

# Row names of the study's tables.
METHOD_NAMES = {
    'none': 'No filtering',
    **{name: f.label for name, f in filters.registry().items()},
    'cascade': 'Cascade (exact, minhash, intra_doc)',
}

# Short point labels for the plots, where the study's names would overlap.
PLOT_LABELS = {
    'No filtering': 'none',
    'ExactNorm': 'exact',
    'MinHash-LSH': 'minhash',
    'Similarity': 'sim',
    'Similarity + Topics': 'sim+T',
    'Similarity + NER': 'sim+N',
    'Similarity + Topics + NER': 'sim+T+N',
    'NER Exact': 'ner_exact',
    'NER Half': 'ner_half',
    'Intra-doc (klarRAG)': 'intra_doc',
    'Cascade (exact, minhash, intra_doc)': 'cascade',
}

DENSE = 'dense'
HYBRID = 'hybrid'
RETRIEVALS = (DENSE, HYBRID)

CSV_COLUMNS = (
    'dataset', 'chunker', 'retrieval', 'method', 'threshold', 'variant', 'chunks', 'kept', 'reduction',
    'precision', 'recall', 'iou', 'oracle', 'char_precision', 'char_recall', 'char_iou',
)


@dataclasses.dataclass(frozen=True)
class GridFilter:
    """One row of the grid: a filter (or the cascade, or none) and its settings.

    Attributes:
      name: `none`, `cascade` or a filter of the registry (`transforms.filters`).
      specs: The filters run in order (empty for `none`).
    """

    name: str
    specs: tuple[dedup.FilterSpec, ...]

    @property
    def method(self) -> str:
        """The study's name of the method."""
        return METHOD_NAMES[self.name]

    @property
    def threshold(self) -> Optional[float]:
        """The filter's threshold; None for `none`, `cascade` and filters without one."""
        if self.name in ('none', 'cascade'):
            return None
        return self.specs[0].threshold


def parse_filter_grid(spec: str) -> list[GridFilter]:
    """Parses `none,exact,minhash@0.8,...`: each item is scored on its own.

    Raises:
      ValueError: For an unknown or repeated item or a bad threshold.
    """
    items = [item.strip() for item in spec.split(',')]
    out = []
    for item in items:
        if not item:
            raise ValueError(f'empty filter in {spec!r}')
        name = item.partition('@')[0].strip()
        # parse_filters validates names and thresholds, and expands `cascade`.
        specs = tuple(dedup.parse_filters(item))
        out.append(GridFilter(name, specs))
    keys = [(g.name, g.threshold) for g in out]
    repeated = sorted({f'{n}@{t}' for n, t in keys if keys.count((n, t)) > 1})
    if repeated:
        raise ValueError(f'filters listed more than once in {spec!r}: {repeated}')
    return out


def parse_chunkers(spec: str) -> list[ChunkerConfig]:
    """Parses `recursive:400:200,fixed:200:0,cluster_semantic:400` (overlap defaults to 0).

    Raises:
      ValueError: For a malformed item or invalid chunker settings.
    """
    out = []
    for item in (i.strip() for i in spec.split(',')):
        parts = item.split(':')
        if not item or not 2 <= len(parts) <= 3:
            raise ValueError(f'chunker must be NAME:SIZE[:OVERLAP], got {item!r}')
        try:
            sizes = [int(p) for p in parts[1:]]
        except ValueError:
            raise ValueError(f'chunker sizes must be integers, got {item!r}') from None
        out.append(ChunkerConfig(parts[0], *sizes))
    labels = [chunker_label(c) for c in out]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f'chunkers listed more than once: {repeated}')
    return out


def chunker_label(config: ChunkerConfig) -> str:
    """File-name label of a chunker, e.g. `recursive_400_200`."""
    return f'{config.name}_{config.chunk_size}_{config.chunk_overlap}'


@dataclasses.dataclass(frozen=True)
class EvaluateConfig:
    """Settings of an evaluation run.

    Attributes:
      dataset: `chroma` or `squad`.
      data: The Chroma folder or the SQuAD JSON file.
      output: Folder for results.csv, the tables and the plots.
      chunkers: Chunker configurations, each scored with every filter.
      filters: The filter grid (see `parse_filter_grid`).
      k: Chunks retrieved per question (5 in the study).
      max_questions: Deterministic sample size (see `sample_questions`); None for all.
      seed: Key of the question sample's hash.
      variants: Token variants among `metrics.VARIANTS`.
      batch_size: Texts per forward pass of the embedding model.
      embedding_model: sentence-transformers model name or path.
      lemma_model: spaCy package for the `preprocessed` lemmas.
      progress: Show a progress bar.
      cache: Root of a feature cache (embeddings, entities) kept between
        runs, or None for none.
      retrieval: `dense` (the study's protocol: exact top-k by cosine) or
        `hybrid` (the query job's ranking: dense + BM25 + salience + recency
        fused by RRF, then cross-document dedup; see transforms/retrieval.py).
    """

    dataset: str
    data: str
    output: str
    chunkers: tuple[ChunkerConfig, ...]
    filters: tuple[GridFilter, ...]
    k: int = 5
    max_questions: Optional[int] = None
    seed: int = 0
    variants: tuple[str, ...] = metrics.VARIANTS
    batch_size: int = 64
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    lemma_model: str = metrics.DEFAULT_LEMMA_MODEL
    progress: bool = True
    retrieval: str = DENSE
    cache: Optional[str] = None

    def __post_init__(self):
        if self.retrieval not in RETRIEVALS:
            raise ValueError(f'unknown retrieval {self.retrieval!r}; choose one of {list(RETRIEVALS)}')
        if self.dataset not in DATASETS:
            raise ValueError(f'unknown dataset {self.dataset!r}; choose one of {list(DATASETS)}')
        if not self.chunkers:
            raise ValueError('at least one chunker is needed')
        if not self.filters:
            raise ValueError('at least one filter (or none) is needed')
        if self.k <= 0:
            raise ValueError(f'k must be > 0, got {self.k}')
        if self.max_questions is not None and self.max_questions <= 0:
            raise ValueError(f'max_questions must be > 0, got {self.max_questions}')
        if self.batch_size <= 0:
            raise ValueError(f'batch_size must be > 0, got {self.batch_size}')
        unknown = [v for v in self.variants if v not in metrics.VARIANTS]
        if unknown or not self.variants:
            raise ValueError(f'variants must be among {list(metrics.VARIANTS)}, got {list(self.variants)}')


# --- one chunker: chunks and features, computed once -------------------------------------


class Resources:
    """Models and per-text caches shared by every chunker of a run.

    Chunk texts repeat across chunkers (every other window of fixed 400/200
    is a window of fixed 400/0), and embeddings and entities depend on the
    text only (`embed_texts` pads by length bucket, so a vector does not
    depend on its batch), so both are kept by text key. With a feature
    cache (`transforms.feature_cache`, the build's layout) they also carry
    over between runs, semantic chunkers' piece embeddings included: a run
    pays only for texts no earlier run embedded.
    """

    def __init__(
        self, model, batch_size: int, settings: dedup.FilterConfig,
        cache: Optional[feature_cache.CacheRun] = None,
    ):
        self.model = model
        self.batch_size = batch_size
        self.settings = settings
        self.cache = cache
        self._ner = None
        self._values: dict[str, dict] = {'embedding': {}, 'entities': {}}
        self._tokens: dict[str, TokenIndex] = {}
        self.computed = {'embedding': 0, 'entities': 0}
        for spec in cache.specs if cache else ():
            if cache.read_from[spec.feature]:
                self._values[spec.feature] = feature_cache.read_entries(cache.read_from[spec.feature], spec.feature)
        self.loaded = {f: len(v) for f, v in self._values.items()}

    def tokens(self, document: Document) -> TokenIndex:
        """The document's model-token index, computed once per run."""
        if document.doc_id not in self._tokens:
            self._tokens[document.doc_id] = TokenIndex(token_offsets(self.model.tokenizer, document.text))
        return self._tokens[document.doc_id]

    def _todo(self, feature: str, texts: Sequence[str]) -> tuple[list[str], list[str]]:
        keys = [text_key(t) for t in texts]
        known = self._values[feature]
        todo = sorted({t for t, k in zip(texts, keys) if k not in known})
        self.computed[feature] += len(todo)
        return keys, todo

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """`(len(texts), dim)` normalized float32 embeddings; each distinct text embedded once."""
        keys, todo = self._todo('embedding', texts)
        vectors = self._values['embedding']
        for text, vector in zip(todo, embed_texts(self.model, todo, self.batch_size)):
            vectors[text_key(text)] = vector
        dim = self.model.get_embedding_dimension()
        return np.stack([vectors[k] for k in keys]) if keys else np.zeros((0, dim), np.float32)

    def entities(self, texts: Sequence[str]) -> list[tuple[str, ...]]:
        """The entities of each text (see `extract_entities`); NER is loaded on first use."""
        keys, todo = self._todo('entities', texts)
        found = self._values['entities']
        if todo:
            if self._ner is None:
                self._ner = load_ner(self.settings.spacy_model)
            computed = extract_entities(
                self._ner, todo, self.settings.entity_labels, self.settings.entity_batch_size)
            found.update(zip(map(text_key, todo), computed))
        return [found[k] for k in keys]

    def save(self) -> None:
        """Writes every value known now as the cache's next generation (old ones are deleted).

        Unlike a build, which keeps only its corpus' entries, the evaluation
        keeps what earlier runs cached too: grids differ from run to run.
        """
        if not self.cache:
            return
        for spec in self.cache.specs:
            self.cache.write_entries(spec.feature, self._values[spec.feature].items())
        self.cache.commit()
        self.cache.prune()


def open_cache(config: 'EvaluateConfig', model, grid: Sequence[GridFilter]) -> Optional[feature_cache.CacheRun]:
    """The feature cache of the run: embeddings always, entities when a filter needs them."""
    if not config.cache:
        return None
    settings = dedup.FilterConfig()
    specs = [feature_cache.CacheSpec(
        'embedding', feature_cache.embedding_settings(config.embedding_model, model, 'cpu'))]
    if grid_needs(grid) & filters.needing('entities'):
        specs.append(feature_cache.CacheSpec('entities', feature_cache.entity_settings(
            settings.spacy_model, model_meta(settings.spacy_model), settings.entity_labels)))
    return feature_cache.CacheRun.open(config.cache, specs, snapshots.new_run_id())


def chunk_corpus(documents: Sequence[Document], chunker: ChunkerConfig, resources: Resources) -> list[Chunk]:
    """Chunks every document; returns the chunks in canonical `(doc_id, chunk_index)` order."""
    chunks = []
    for document in documents:
        tokens = resources.tokens(document)
        if chunker.is_semantic:
            spans = semantic_spans(
                chunker.name, document.text, tokens, resources.model,
                chunker.chunk_size, resources.batch_size, embed=resources.embed)
        else:
            spans = chunk_spans(document.text, tokens, chunker)
        chunks.extend(document_chunks(document, spans, tokens))
    return sorted(chunks, key=Chunk.sort_key)


def grid_needs(grid: Sequence[GridFilter]) -> set[str]:
    """The filter names of the grid, i.e. which features must be computed."""
    return {s.name for g in grid for s in g.specs}


def with_features(
    chunks: Sequence[Chunk], vectors: np.ndarray, names: set[str], resources: Resources
) -> list[Chunk]:
    """Sets on each chunk its embedding and the features the grid's filters need."""
    settings = resources.settings
    fields: dict[str, list] = {'embedding': list(vectors)}
    texts = [c.text for c in chunks]
    if names & filters.needing('minhash'):
        fields['minhash'] = list(signatures(texts, settings.minhash_config()))
    if names & filters.needing('entities'):
        fields['entities'] = resources.entities(texts)
    if names & filters.needing('topics') and len(chunks):
        # Same as features.with_topics: KMeans over the canonical order.
        fields['topic'] = [int(t) for t in dedup.topics(
            vectors, settings.n_topics, settings.topic_seed, [c.chunk_id for c in chunks])]
    return [
        dataclasses.replace(c, **{k: v[i] for k, v in fields.items()}) for i, c in enumerate(chunks)
    ]


def apply_filters(
    chunks: Sequence[Chunk], specs: Sequence[dedup.FilterSpec], settings: dedup.FilterConfig
) -> list[Chunk]:
    """Runs the filters in order, as the build does; returns the kept chunks.

    Kept chunks carry what the filters changed (intra_doc's boosted salience).

    Args:
      chunks: All chunks, in canonical order, with the features the filters need.
      specs: The filters, in run order.
      settings: Filter settings (seeds, intra_doc parameters).

    Raises:
      ValueError: For an unknown filter name.
    """
    kept = list(chunks)
    for spec in specs:
        kept, _ = dedup.apply_filter(kept, spec, settings)
    return kept


def hybrid_top_k(
    kept: Sequence[Chunk], rows: np.ndarray, vectors: np.ndarray, questions: Sequence[Question],
    queries: np.ndarray, k: int, config: retrieval.RetrievalConfig,
) -> list[list[int]]:
    """The query job's ranking over the kept chunks; returns rows of `vectors`.

    BM25 is built over the kept texts, as a filtered build writes it; each
    question gets the fused, deduplicated top-k (possibly fewer than k, when
    the relevance floor leaves fewer candidates).

    Args:
      kept: The kept chunks, in the order of `rows`.
      rows: Their rows in `vectors`.
      vectors: Embeddings of all chunks.
      questions: The questions (their text feeds BM25).
      queries: The questions' embeddings.
      k: Chunks per question.
      config: Candidates, floor, weights and dedup threshold.
    """
    if len(rows) == 0:
        return [[] for _ in questions]
    sub = np.ascontiguousarray(vectors[rows], dtype=np.float32)
    chunk_ids = [c.chunk_id for c in kept]
    salience = [c.salience for c in kept]
    timestamps = [retrieval.document_timestamp(c.metadata) for c in kept]
    bm25 = retrieval.build_bm25([c.text for c in kept])
    dense = top_k(sub, np.arange(len(rows)), queries, config.candidates)
    out = []
    for question, query, dense_rows in zip(questions, queries, dense):
        tokens = retrieval.bm25_tokenize([question.question], return_ids=False)[0]
        scores = retrieval.bm25_scores(bm25, tokens, len(rows))
        fused = retrieval.fuse_candidates(
            query, dense_rows, scores, sub, chunk_ids, salience, timestamps, config)
        selected, _ = retrieval.dedup_ranked([sub[r] for r in fused.rows], config.dedup_threshold, limit=k)
        out.append([int(rows[fused.rows[i]]) for i in selected])
    return out


def top_k(vectors: np.ndarray, rows: np.ndarray, queries: np.ndarray, k: int) -> list[list[int]]:
    """Exact top-k by inner product among `vectors[rows]`; returns rows of `vectors`.

    An `IndexFlatIP` over the kept rows only, the index a filtered build
    would write, so a removed chunk can never take a place in the top-k.
    """
    import faiss

    if len(rows) == 0:
        return [[] for _ in range(len(queries))]
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors[rows], dtype=np.float32))
    _, found = index.search(np.ascontiguousarray(queries, dtype=np.float32), min(k, len(rows)))
    return [[int(rows[i]) for i in hits if i >= 0] for hits in found]


class TokenMatrix:
    """Chunk token sets of one variant, as per-document incidence matrices for the oracle."""

    def __init__(self, token_sets: Sequence[frozenset], doc_ids: Sequence[str]):
        from scipy import sparse

        self.vocab: dict[str, int] = {}
        indices: list[int] = []
        indptr = [0]
        for tokens in token_sets:
            indices.extend(sorted(self.vocab.setdefault(t, len(self.vocab)) for t in tokens))
            indptr.append(len(indices))
        matrix = sparse.csr_matrix(
            (np.ones(len(indices), dtype=bool), indices, indptr),
            shape=(len(token_sets), max(1, len(self.vocab))))
        rows: dict[str, list[int]] = collections.defaultdict(list)
        for i, doc_id in enumerate(doc_ids):
            rows[doc_id].append(i)
        self.rows = {d: np.array(r) for d, r in rows.items()}
        self._by_doc = {d: matrix[r].tocsc() for d, r in self.rows.items()}

    def incidence(self, doc_id: str, expected: frozenset) -> np.ndarray:
        """`(chunks of doc_id, tokens of expected found in any chunk)` boolean matrix."""
        columns = sorted(self.vocab[t] for t in expected if t in self.vocab)
        if doc_id not in self._by_doc:
            return np.zeros((0, len(columns)), dtype=bool)
        return self._by_doc[doc_id][:, columns].toarray().astype(bool)


def evaluate_chunker(
    chunker: ChunkerConfig,
    documents: Sequence[Document],
    questions: Sequence[Question],
    query_vectors: np.ndarray,
    lemmas: dict[str, metrics.LemmaTable],
    config: EvaluateConfig,
    resources: Resources,
    bar=None,
) -> tuple[list[dict], dict]:
    """Scores every filter of the grid on one chunker.

    Returns:
      `(one row per filter and variant, wall seconds per stage)`.
    """
    timings: dict[str, float] = {}
    started = time.perf_counter()
    chunks = chunk_corpus(documents, chunker, resources)
    timings['chunk'] = time.perf_counter() - started

    started = time.perf_counter()
    vectors = resources.embed([c.text for c in chunks])
    timings['embed'] = time.perf_counter() - started

    started = time.perf_counter()
    chunks = with_features(chunks, vectors, grid_needs(config.filters), resources)
    timings['features'] = time.perf_counter() - started

    started = time.perf_counter()
    texts = {d.doc_id: d.text for d in documents}
    doc_of = [c.doc_id for c in chunks]
    sets, expected, matrices = {}, {}, {}
    for variant in config.variants:
        if variant == metrics.RAW:
            sets[variant] = [metrics.raw_tokens(c.text) for c in chunks]
            expected[variant] = [
                frozenset().union(*(metrics.raw_tokens(texts[q.doc_id][s:e]) for s, e in q.references))
                for q in questions]
        else:
            sets[variant] = [lemmas[c.doc_id].tokens(c.char_start, c.char_end) for c in chunks]
            expected[variant] = [lemmas[q.doc_id].spans_tokens(q.references) for q in questions]
        matrices[variant] = TokenMatrix(sets[variant], doc_of)
    incidences = {
        v: [matrices[v].incidence(q.doc_id, e) for q, e in zip(questions, expected[v])]
        for v in config.variants
    }
    timings['tokens'] = time.perf_counter() - started

    rows = []
    row_of = {c.chunk_id: i for i, c in enumerate(chunks)}
    filter_seconds = evaluate_seconds = 0.0
    for grid in config.filters:
        started = time.perf_counter()
        kept_chunks = apply_filters(chunks, grid.specs, resources.settings)
        filter_seconds += time.perf_counter() - started
        started = time.perf_counter()
        kept_ids = {c.chunk_id for c in kept_chunks}
        kept = np.array([c.chunk_id in kept_ids for c in chunks], dtype=bool)
        if config.retrieval == HYBRID:
            kept_rows = np.array([row_of[c.chunk_id] for c in kept_chunks], dtype=np.int64)
            retrieved = hybrid_top_k(kept_chunks, kept_rows, vectors, questions,
                                     query_vectors, config.k, retrieval.RetrievalConfig())
        else:
            retrieved = top_k(vectors, np.flatnonzero(kept), query_vectors, config.k)
        char = [_char_scores(q, hits, chunks) for q, hits in zip(questions, retrieved)]
        for variant in config.variants:
            token, oracle = [], []
            for i, (q, hits) in enumerate(zip(questions, retrieved)):
                own = frozenset().union(*(sets[variant][r] for r in hits if doc_of[r] == q.doc_id))
                foreign = frozenset().union(*(sets[variant][r] for r in hits if doc_of[r] != q.doc_id))
                token.append(metrics.token_scores(expected[variant][i], own, foreign))
                oracle.append(_oracle(incidences[variant][i], matrices[variant], q, kept,
                                      len(expected[variant][i]), config.k))
            rows.append({
                'dataset': config.dataset,
                'chunker': chunker_label(chunker),
                'retrieval': config.retrieval,
                'method': grid.method,
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
        if bar is not None:
            bar.update(1)
    timings['filter'] = filter_seconds
    timings['score'] = evaluate_seconds
    LOG.info('%s: %d chunks; seconds %s', chunker_label(chunker), len(chunks),
             {k: round(v, 1) for k, v in timings.items()})
    return rows, timings


def _char_scores(question: Question, hits: Sequence[int], chunks: Sequence[Chunk]) -> metrics.Scores:
    own = [(chunks[r].char_start, chunks[r].char_end) for r in hits if chunks[r].doc_id == question.doc_id]
    foreign: dict[str, list] = collections.defaultdict(list)
    for r in hits:
        if chunks[r].doc_id != question.doc_id:
            foreign[chunks[r].doc_id].append((chunks[r].char_start, chunks[r].char_end))
    foreign_chars = sum(metrics.spans_length(spans) for spans in foreign.values())
    return metrics.char_scores(question.references, own, foreign_chars)


def _oracle(incidence, matrix: TokenMatrix, question: Question, kept: np.ndarray, n_expected: int, k: int) -> float:
    if not n_expected or question.doc_id not in matrix.rows:
        return 0.0
    # Only the question's document, and only chunks the filter kept.
    _, covered = metrics.greedy_cover(incidence[kept[matrix.rows[question.doc_id]]], k)
    return covered / n_expected


# --- outputs -------------------------------------------------------------------------------


def write_csv(rows: Sequence[dict], path: Path) -> None:
    """Writes results.csv, floats with 6 decimals."""
    with path.open('w', newline='', encoding='utf-8') as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()})


def markdown_table(rows: Sequence[dict], title: str) -> str:
    """The study's table layout, one section per variant plus the character ranges."""
    lines = [f'# {title}', '']
    variants = list(dict.fromkeys(r['variant'] for r in rows))
    for variant in variants:
        lines += [f'## Tokens, {variant}', '',
                  '| Method | Threshold | Reduction (%) | Precision | Recall | IoU | Oracle |',
                  '|---|---|---|---|---|---|---|']
        for r in (r for r in rows if r['variant'] == variant):
            lines.append(
                f"| {r['method']} | {_threshold(r)} | {r['reduction']:.3f} | {r['precision']:.3f} "
                f"| {r['recall']:.3f} | {r['iou']:.3f} | {r['oracle']:.3f} |")
        lines.append('')
    lines += ['## Character ranges (Chroma study metric)', '',
              '| Method | Threshold | Reduction (%) | Precision | Recall | IoU |',
              '|---|---|---|---|---|---|']
    for r in (r for r in rows if r['variant'] == variants[0]):
        lines.append(
            f"| {r['method']} | {_threshold(r)} | {r['reduction']:.3f} | {r['char_precision']:.4f} "
            f"| {r['char_recall']:.3f} | {r['char_iou']:.4f} |")
    return '\n'.join(lines) + '\n'


def _threshold(row: dict) -> str:
    return '-' if row['threshold'] == '' else f"{row['threshold']:.3f}"


def plot_chunker(rows: Sequence[dict], title: str, path: Path) -> None:
    """Reduction vs recall and vs IoU, one labelled point per filter, one row per variant."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r['variant'] for r in rows))
    fig, axes = plt.subplots(len(variants), 2, figsize=(13, 5.5 * len(variants)), squeeze=False)
    for row_axes, variant in zip(axes, variants):
        points = [r for r in rows if r['variant'] == variant]
        for ax, metric in zip(row_axes, ('recall', 'iou')):
            for r in points:
                label = PLOT_LABELS.get(r['method'], r['method']) + (
                    '' if r['threshold'] == '' else f"@{r['threshold']:g}")
                baseline = r['method'] == METHOD_NAMES['none']
                ax.scatter(r['reduction'], r[metric], marker='*' if baseline else 'o',
                           s=180 if baseline else 30, color='red' if baseline else 'tab:blue', zorder=3)
                ax.annotate(label, (r['reduction'], r[metric]), fontsize=7,
                            xytext=(4, 3), textcoords='offset points')
                if baseline:
                    ax.axhline(r[metric], color='red', linestyle='--', linewidth=0.8,
                               label='no filtering')
            ax.set_xlabel('Reduction (% of chunks removed)')
            ax.set_ylabel(f'{"Recall" if metric == "recall" else "IoU"} ({variant} tokens)')
            ax.set_title(f'{title}: reduction vs {"recall" if metric == "recall" else "IoU"}')
            ax.grid(alpha=0.3)
            if any(r['method'] == METHOD_NAMES['none'] for r in points):
                ax.legend(loc='lower left', fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the job -------------------------------------------------------------------------------


def evaluate(config: EvaluateConfig, model=None) -> dict:
    """Runs the grid and writes results.csv, table_*.md, plot_*.png and summary.json.

    Args:
      config: The run's settings.
      model: The loaded embedding model, if the caller has it; loaded from
        `config.embedding_model` otherwise.

    Returns:
      The summary: settings, question count and wall seconds per chunker and stage.

    Raises:
      ValueError: For unreadable data or models.
    """
    started = time.perf_counter()
    documents, questions = read_dataset(config.dataset, config.data)
    questions = sample_questions(questions, config.max_questions, config.seed)
    if not questions:
        raise ValueError(f'no questions in {config.data}')
    output = Path(config.output)
    output.mkdir(parents=True, exist_ok=True)

    if model is None:
        model = load_embedding_model(config.embedding_model)
    lock = snapshots.lock(config.cache) if config.cache else contextlib.nullcontext()
    with lock:
        if config.cache:
            feature_cache.delete_incomplete(config.cache)
        resources = Resources(model, config.batch_size, dedup.FilterConfig(),
                              open_cache(config, model, config.filters))
        summary = _evaluate(config, documents, questions, resources, output, started)
        t = time.perf_counter()
        resources.save()
        summary['seconds']['save_cache'] = time.perf_counter() - t
    summary['cache'] = {
        'root': config.cache, 'loaded': resources.loaded, 'computed': resources.computed}
    summary['seconds']['total'] = time.perf_counter() - started
    (output / 'summary.json').write_text(json.dumps(summary, indent=2) + '\n', encoding='utf-8')
    return summary


def _evaluate(config, documents, questions, resources: Resources, output: Path, started: float) -> dict:
    """Scores the grid; writes results.csv, the tables and the plots; returns the summary."""
    from tqdm import tqdm

    query_vectors = resources.embed([q.question for q in questions])
    lemmas: dict[str, metrics.LemmaTable] = {}
    setup = {'load_and_queries': time.perf_counter() - started}
    if metrics.PREPROCESSED in config.variants:
        t = time.perf_counter()
        nlp = metrics.load_lemmatizer(config.lemma_model)
        tables = metrics.lemma_tables(nlp, [d.text for d in documents])
        lemmas = {d.doc_id: table for d, table in zip(documents, tables)}
        setup['lemmatize'] = time.perf_counter() - t

    all_rows, timings = [], {}
    with tqdm(total=len(config.chunkers) * len(config.filters), desc='evaluate', unit='filter',
              disable=not config.progress, file=sys.stderr) as bar:
        for chunker in config.chunkers:
            label = chunker_label(chunker)
            bar.set_postfix_str(label)
            t = time.perf_counter()
            rows, stages = evaluate_chunker(
                chunker, documents, questions, query_vectors, lemmas, config, resources, bar)
            stages['total'] = time.perf_counter() - t
            timings[label] = stages
            all_rows.extend(rows)
            (output / f'table_{label}.md').write_text(
                markdown_table(rows, f'{config.dataset}, {label}, k={config.k}, '
                                     f'{len(questions)} questions'), encoding='utf-8')
            plot_chunker(rows, f'{config.dataset} {label}', output / f'plot_{label}.png')
            write_csv(all_rows, output / 'results.csv')
    summary = {
        'dataset': config.dataset,
        'data': str(config.data),
        'documents': len(documents),
        'questions': len(questions),
        'k': config.k,
        'retrieval': config.retrieval,
        'chunkers': [chunker_label(c) for c in config.chunkers],
        'filters': [f'{g.name}' + ('' if g.threshold is None else f'@{g.threshold:g}') for g in config.filters],
        'variants': list(config.variants),
        'seconds': {'setup': setup, 'chunkers': timings},
    }
    return summary


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog='ragsieve evaluate',
        description='Score chunkers x redundancy filters on a QA dataset, as the chunk-filtering study.')
    parser.add_argument('--dataset', type=str, choices=DATASETS, default=CHROMA,
                        help='chroma: folder of *.md corpora + questions_df.csv; squad: SQuAD v1.1 JSON.')
    parser.add_argument('--data', type=str, default=None,
                        help=f'Dataset path; for chroma defaults to {DEFAULT_CHROMA_DATA}.')
    parser.add_argument('--output', type=str, required=True,
                        help='Folder for results.csv, table_*.md, plot_*.png and summary.json.')
    parser.add_argument('--chunkers', type=str, default=DEFAULT_CHUNKERS,
                        help=f'Comma-separated NAME:SIZE[:OVERLAP], NAME one of {list(CHUNKERS)}.')
    parser.add_argument('--filters', type=str, default=DEFAULT_FILTERS,
                        help='Comma-separated grid, each scored alone: none, cascade, NAME or '
                             f'NAME@THRESHOLD with NAME one of {sorted(filters.names())}.')
    parser.add_argument('--k', type=int, default=5, help='Chunks retrieved per question.')
    parser.add_argument('--max_questions', type=int, default=None,
                        help='Score a deterministic sample of this many questions (default: all).')
    parser.add_argument('--seed', type=int, default=0, help='Key of the question sample hash.')
    parser.add_argument('--variants', type=str, default=','.join(metrics.VARIANTS),
                        help=f'Token variants, comma-separated, among {list(metrics.VARIANTS)}.')
    parser.add_argument('--batch_size', type=int, default=64,
                        help='Texts per forward pass of the embedding model.')
    parser.add_argument('--embedding_model', type=str, default=DEFAULT_EMBEDDING_MODEL,
                        help='sentence-transformers model name or local path.')
    parser.add_argument('--lemma_model', type=str, default=metrics.DEFAULT_LEMMA_MODEL,
                        help='spaCy package lemmatizing the preprocessed variant.')
    parser.add_argument('--retrieval', type=str, choices=RETRIEVALS, default=DENSE,
                        help='dense: exact top-k by cosine (the study); hybrid: the query job\'s '
                             'RRF of dense, BM25, salience and recency, then cross-document dedup.')
    parser.add_argument('--cache', type=str, default=None,
                        help='Root of the feature cache (embeddings, entities) kept between runs, '
                             'in the build\'s layout; default: $XDG_CACHE_HOME/ragsieve/evaluate '
                             '(~/.cache/...); "none" turns it off.')
    parser.add_argument('--no_progress', action='store_true', help='Hide the progress bar.')
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> EvaluateConfig:
    """Builds and validates the config from parsed flags.

    Raises:
      ValueError: For invalid or missing settings.
    """
    data = args.data
    if data is None:
        if args.dataset != CHROMA:
            raise ValueError(f'--data is required for --dataset {args.dataset}')
        data = str(DEFAULT_CHROMA_DATA)
    return EvaluateConfig(
        dataset=args.dataset,
        data=data,
        output=args.output,
        chunkers=tuple(parse_chunkers(args.chunkers)),
        filters=tuple(parse_filter_grid(args.filters)),
        k=args.k,
        max_questions=args.max_questions,
        seed=args.seed,
        variants=tuple(v.strip() for v in args.variants.split(',')),
        batch_size=args.batch_size,
        embedding_model=args.embedding_model,
        lemma_model=args.lemma_model,
        progress=not args.no_progress,
        retrieval=args.retrieval,
        cache=None if args.cache == feature_cache.NO_CACHE else (args.cache or str(default_cache())),
    )


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Parses flags, runs the evaluation and prints where the results are.

    Raises:
      ValueError: For invalid flags or unreadable data.
    """
    logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
    config = config_from_args(parse_args(argv))
    summary = evaluate(config)
    print(f"evaluated {len(summary['chunkers'])} chunkers x {len(summary['filters'])} filters on "
          f"{summary['questions']} questions in {summary['seconds']['total']:.0f} s -> {config.output}")
    return summary


if __name__ == '__main__':
    from pipelines import cli

    sys.exit(cli.run_and_report('evaluate', run, sys.argv[1:]))
