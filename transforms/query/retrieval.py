"""Query-time ranking: candidates, score fusion and post-ranking cross-document dedup.

Pure functions, no Beam and no model: `pipelines/query.py` wires them to a
built index. The candidates are the union of the dense and the BM25 top-N;
by default their scores are fused by a convex combination of the normalized
dense and BM25 scores (`fusion.py`), and salience and recency only break
near-ties. `fusion='rrf'` is klarRAG's retrieval phase: each signal ranks
the candidates and reciprocal rank fusion adds `weight / (rrf_k + rank)` per
signal. Either way the fused list is then walked in order, skipping chunks
too similar to one already selected.

Neutral values: a signal that has no value for a chunk (a null salience, no
parseable timestamp in the metadata, a BM25 score of 0 i.e. no query term in
the chunk) gives that chunk no contribution for that signal, rather than a
made-up rank; its rank is reported as None.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from typing import Optional, Sequence

import numpy as np

from transforms.ingest.records import RECENCY_KEYS, parse_timestamp
from transforms.query import fusion as score_fusion
from transforms.validate import check_threshold

SIGNALS = ('dense', 'bm25', 'salience', 'recency')
CONVEX = 'convex'
RRF = 'rrf'
FUSIONS = (CONVEX, RRF)
# Where salience and recency enter: as a bounded tie-break (`fusion.tie_break`),
# or as two more ranked signals of the RRF (klarRAG's, the default before issue 40).
TIEBREAK = 'tiebreak'
FUSED = 'fused'
PRIORS = (TIEBREAK, FUSED)
# What becomes of a candidate below the relevance floor; KEEP: nothing, unless the question looks
# off-topic (`floor_gate`), so the floor guards against off-topic questions only.
DROP = 'drop'
LAST = 'last'
KEEP = 'keep'
BELOW_FLOOR = (DROP, LAST, KEEP)
# Added to the fused score of a candidate ranked below the floor: a negative score says so.
BELOW_OFFSET = -2.0


@dataclasses.dataclass(frozen=True)
class RetrievalConfig:
    """How a query ranks and deduplicates chunks.

    The defaults were chosen by leave-one-set-out over five IR sets
    (docs/results.md, "Fusion chosen across sets"); `fusion='rrf',
    prior='fused', below_floor='drop', floor_gate=-1` is the ranking before
    issue 40.

    Attributes:
      candidates: N: the union of the dense top-N and the BM25 top-N is fused
        (default 50).
      fusion: `convex` (default): `alpha * dense + (1 - alpha) * bm25` of the
        scores normalized over the candidates (`fusion.convex_fuse`); `rrf`:
        reciprocal rank fusion of the signals' ranks with their weights.
      alpha: Convex fusion: weight of the dense score, in [0, 1] (default
        0.4: BM25's best candidate is never outweighed by a cosine alone).
      normalization: Convex fusion: `minmax_floor` (default: min-max over
        the candidates, a cosine below `min_relevance` counting 0), `minmax`
        or `tmm` (`fusion.normalize`).
      min_relevance: The relevance floor: a candidate whose dense cosine to
        the query is below this, and that BM25 did not find
        (`floor_exempt_bm25`), is below the floor (default 0.25, klarRAG's
        MinRelevanceScore; -1: none is).
      floor_exempt_bm25: A candidate BM25 ranks in its top N is kept
        whatever its cosine (default 5; 0 floors every candidate, as
        klarRAG). Measured in docs/results.md ("The relevance floor").
      below_floor: What becomes of a candidate below the floor: `drop`
        (klarRAG), `last` (ranked after every candidate above it, so the top
        k is the floored ranking's and nothing deep is lost) or `keep`
        (default: nothing, so the floor acts only through `floor_gate`; a
        second hop far from the question in embedding space is not set
        apart from what BM25 ranks it with).
      floor_gate: A question whose best candidate's cosine is below this
        looks off-topic for the index: every candidate below
        `min_relevance` is dropped, BM25's top N too (klarRAG's floor), so
        it gets few hits (default 0.35; -1: no question is).
      relative_floor: Candidates whose fused score is below this fraction of
        the best candidate's are dropped (default 0: none).
      prior: Where salience and recency enter: `tiebreak` (default) adds at
        most `tie_epsilon` times the best fused score, so they reorder only
        candidates of comparable relevance; `fused` ranks them as two more
        RRF signals (needs `fusion='rrf'`).
      tie_epsilon: `tiebreak`: the largest raise, as a fraction of the best
        fused score (default 0.01).
      dedup_threshold: A chunk whose cosine to an already selected chunk is at
        least this is skipped as a duplicate (default 0.90, as at ingestion).
      rrf_k: Reciprocal rank fusion constant (default 60).
      weight_dense: RRF weight of the dense rank (default 1.0).
      weight_bm25: RRF weight of the BM25 rank (default 1.0).
      weight_salience: Weight of salience: in the tie-break's mix, or its RRF
        weight with `prior='fused'` (default 0.5).
      weight_recency: Weight of recency, likewise (default 0.5).
    """

    candidates: int = 50
    fusion: str = CONVEX
    alpha: float = 0.4
    normalization: str = score_fusion.MINMAX_FLOOR
    min_relevance: float = 0.25
    floor_exempt_bm25: int = 5
    below_floor: str = KEEP
    floor_gate: float = 0.35
    relative_floor: float = 0.0
    prior: str = TIEBREAK
    tie_epsilon: float = 0.01
    dedup_threshold: float = 0.90
    rrf_k: float = score_fusion.RRF_K
    weight_dense: float = 1.0
    weight_bm25: float = 1.0
    weight_salience: float = 0.5
    weight_recency: float = 0.5

    def __post_init__(self):
        if self.candidates <= 0:
            raise ValueError(f'candidates must be > 0, got {self.candidates}')
        if self.fusion not in FUSIONS:
            raise ValueError(f'fusion must be one of {list(FUSIONS)}, got {self.fusion!r}')
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f'alpha must be in [0, 1], got {self.alpha}')
        if self.normalization not in score_fusion.NORMALIZATIONS:
            raise ValueError(f'normalization must be one of {list(score_fusion.NORMALIZATIONS)}, '
                             f'got {self.normalization!r}')
        if not -1.0 <= self.min_relevance <= 1.0:
            raise ValueError(f'min_relevance must be a cosine in [-1, 1], got {self.min_relevance}')
        if isinstance(self.floor_exempt_bm25, bool) or not isinstance(self.floor_exempt_bm25, numbers.Integral) \
                or self.floor_exempt_bm25 < 0:
            raise ValueError(f'floor_exempt_bm25 must be a whole number >= 0, got {self.floor_exempt_bm25!r}')
        if self.below_floor not in BELOW_FLOOR:
            raise ValueError(f'below_floor must be one of {list(BELOW_FLOOR)}, got {self.below_floor!r}')
        if not -1.0 <= self.floor_gate <= 1.0:
            raise ValueError(f'floor_gate must be a cosine in [-1, 1], got {self.floor_gate}')
        if not 0.0 <= self.relative_floor <= 1.0:
            raise ValueError(f'relative_floor must be in [0, 1], got {self.relative_floor}')
        if self.prior not in PRIORS:
            raise ValueError(f'prior must be one of {list(PRIORS)}, got {self.prior!r}')
        if self.prior == FUSED and self.fusion != RRF:
            raise ValueError("prior='fused' ranks salience and recency as RRF signals: it needs fusion='rrf'")
        if not 0.0 <= self.tie_epsilon <= 1.0:
            raise ValueError(f'tie_epsilon must be in [0, 1], got {self.tie_epsilon}')
        check_threshold('dedup_threshold', self.dedup_threshold)
        if not (self.rrf_k > 0 and math.isfinite(self.rrf_k)):
            raise ValueError(f'rrf_k must be a finite number > 0, got {self.rrf_k}')
        for name, value in self.weights.items():
            # NaN fails every comparison, so `value < 0` alone would let it through.
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f'weight_{name} must be a finite number >= 0, got {value}')

    @property
    def weights(self) -> dict[str, float]:
        """Weight per signal name."""
        return {s: getattr(self, f'weight_{s}') for s in SIGNALS}


def check_question(question) -> None:
    """Refuses a question no ranking can answer, with a clear message.

    Raises:
      ValueError: if `question` is not a string, is blank or holds a lone
        surrogate (bytes that were not UTF-8, decoded with surrogateescape,
        as Python decodes a command line).
    """
    if not isinstance(question, str):
        raise ValueError(f'the question must be text, got {type(question).__name__}')
    if not question.strip():
        raise ValueError('the question is empty')
    bad = next((i for i, c in enumerate(question) if '\ud800' <= c <= '\udfff'), None)
    if bad is not None:
        raise ValueError(f'the question is not valid Unicode text: a lone surrogate {question[bad]!r} at '
                         f'character {bad} (bytes that are not UTF-8?)')


def check_k(k, name: str = 'k') -> None:
    """Refuses a result count that is not a whole number >= 1 (2.5, nan, '3' and True are not).

    Raises:
      ValueError: naming `name`.
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f'{name} must be a whole number >= 1, got {k!r}')
    if k < 1:
        raise ValueError(f'{name} must be >= 1, got {k}')


@dataclasses.dataclass(frozen=True)
class Fused:
    """Candidates of one query, fused.

    Attributes:
      rows: Candidate rows, best first (score descending, then chunk_id).
      scores: Their fused scores.
      rankings: Per signal, the rank of each candidate chunk_id that has a value.
      cosines: Dense cosine to the query, per candidate row.
    """

    rows: list[int]
    scores: list[float]
    rankings: dict[str, dict[str, int]]
    cosines: dict[int, float]


def fuse_candidates(
    query: np.ndarray,
    dense_rows: Sequence[int],
    bm25: np.ndarray,
    embeddings: np.ndarray,
    chunk_ids: Sequence[str],
    salience: Sequence[Optional[float]],
    timestamps: Sequence[Optional[float]],
    config: RetrievalConfig,
) -> Fused:
    """Hybrid ranking of one query: candidates, floors, per-signal ranks, fused scores.

    Candidates are `dense_rows` (the dense top-N) together with the BM25 top-N;
    a BM25 score of 0 means no query term occurs, so it makes no lexical
    candidate. Every candidate is scored by both signals (its exact cosine and
    its BM25 score), whichever list it came from. A candidate is below the
    floor when its cosine to the query is below `config.min_relevance` and
    BM25 does not rank it in its top `config.floor_exempt_bm25`; those are
    dropped (`below_floor='drop'`) or ranked after all the others (`'last'`).
    A question whose best candidate is below `config.floor_gate` looks
    off-topic: every candidate below `min_relevance` is dropped, BM25's
    top N too. Each tier is fused (`config.fusion`), salience and recency
    enter as `config.prior` says, and those below `config.relative_floor` of
    their tier's best fused score are dropped; the scores of the tier below
    the floor are shifted by `BELOW_OFFSET` (negative), so scores fall as
    the ranking goes down.

    Args:
      query: The normalized query embedding.
      dense_rows: The dense top-N rows (e.g. from FAISS).
      bm25: BM25 score of every row.
      embeddings: Normalized chunk embeddings, one row per chunk.
      chunk_ids: chunk_id per row (ties in every ranking are broken by it).
      salience: Salience per row; None is neutral.
      timestamps: Document time per row (POSIX seconds); None is neutral.
      config: Candidates, fusion, floors, weights.
    """
    rows = sorted(set(int(r) for r in dense_rows if r >= 0) | set(top_n(bm25, config.candidates, min_score=0.0)))
    # Exact cosines from the stored vectors, the same numbers FAISS ranks by.
    cosines = {r: float(embeddings[r] @ query) for r in rows}
    # What BM25 ranks this high was found by another signal: the floor does not drop it.
    exempt = set(top_n(bm25, config.floor_exempt_bm25, min_score=0.0)) if config.floor_exempt_bm25 else set()
    # A question no candidate is close to looks off-topic: klarRAG's floor, on every candidate.
    off_topic = max(cosines.values(), default=-1.0) < config.floor_gate
    floored = off_topic or config.below_floor != KEEP
    below = {r for r in rows if floored and cosines[r] < config.min_relevance and (off_topic or r not in exempt)}
    if config.below_floor == DROP or off_topic:
        rows, below = [r for r in rows if r not in below], set()
    by_id = {chunk_ids[r]: r for r in rows}
    rankings = _rankings(by_id, cosines, bm25, salience, timestamps)
    out_rows, out_scores = [], []
    # Candidates above the floor first, then those below it ('last'), each tier fused on its own;
    # the scores below the floor are shifted below every score above it (fused scores are < 2).
    for tier, offset in (([r for r in rows if r not in below], 0.0), ([r for r in rows if r in below], BELOW_OFFSET)):
        tier_ids = {chunk_ids[r]: r for r in tier}
        ids, kept = list(tier_ids), list(tier_ids.values())
        tier_rankings = rankings if not below else _rankings(tier_ids, cosines, bm25, salience, timestamps)
        scores = _fused_scores(ids, kept, tier_rankings, cosines, bm25, salience, timestamps, config)
        keep = score_fusion.relative_floor(scores, config.relative_floor)
        order = sorted((i for i in range(len(ids)) if keep[i]), key=lambda i: (-scores[i], ids[i]))
        out_rows += [kept[i] for i in order]
        out_scores += [float(scores[i]) + offset for i in order]
    return Fused(out_rows, out_scores, rankings, cosines)


def _rankings(by_id, cosines, bm25, salience, timestamps) -> dict[str, dict[str, int]]:
    return {
        'dense': score_fusion.rank({c: cosines[r] for c, r in by_id.items()}),
        'bm25': score_fusion.rank({c: float(bm25[r]) if bm25[r] > 0 else None for c, r in by_id.items()}),
        'salience': score_fusion.rank({c: salience[r] for c, r in by_id.items()}),
        'recency': score_fusion.rank({c: timestamps[r] for c, r in by_id.items()}),
    }


def _fused_scores(ids, kept, rankings, cosines, bm25, salience, timestamps, config: RetrievalConfig) -> np.ndarray:
    """Fused score per candidate (`ids`, rows `kept`), salience and recency as `config.prior` says."""
    if config.fusion == RRF:
        weights = config.weights
        if config.prior == TIEBREAK:
            weights = {**weights, 'salience': 0.0, 'recency': 0.0}
        fused = dict(score_fusion.rrf_fuse(rankings, weights, config.rrf_k))
        scores = np.array([fused.get(c, 0.0) for c in ids])
    else:
        scores = score_fusion.convex_fuse(
            np.array([cosines[r] for r in kept]), np.array([float(bm25[r]) for r in kept]),
            config.alpha, config.normalization, config.min_relevance)
    if config.prior == TIEBREAK:
        values = score_fusion.prior([salience[r] for r in kept], [timestamps[r] for r in kept],
                                    config.weight_salience, config.weight_recency)
        scores = score_fusion.tie_break(scores, values, config.tie_epsilon)
    return scores


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A chunk dropped by post-ranking dedup.

    Attributes:
      position: Its position in the fused list.
      duplicate_of: Position (in the fused list) of the selected chunk it duplicates.
      cosine: Their cosine similarity.
    """

    position: int
    duplicate_of: int
    cosine: float


def dedup_ranked(
    vectors: Sequence[Optional[np.ndarray]],
    threshold: float,
    limit: Optional[int] = None,
) -> tuple[list[int], list[Skipped]]:
    """Walks a ranked list, skipping items too similar to an already selected one.

    Args:
      vectors: Normalized embeddings in rank order; None where a chunk has
        none (it is kept: there is nothing to compare).
      threshold: Cosine at or above which an item is a duplicate.
      limit: Stop once this many are selected; None walks the whole list.

    Returns:
      The selected positions, in rank order, and the skipped ones, each with
      the highest-ranked selected item it duplicates.
    """
    dim = next((len(v) for v in vectors if v is not None), 0)
    # Selected vectors fill a preallocated matrix: one matrix-vector product
    # per item, no re-stacking (a full all-pairs product was slower at p95 on
    # busy cores: BLAS threads for a 100 x 100 result).
    kept = np.empty((len(vectors), dim), np.float32)
    kept_positions: list[int] = []
    selected: list[int] = []
    skipped: list[Skipped] = []
    for i, v in enumerate(vectors):
        if limit is not None and len(selected) >= limit:
            break
        if v is not None:
            v = np.asarray(v, np.float32)
            if kept_positions:
                similar = kept[: len(kept_positions)] @ v
                hits = np.nonzero(similar >= threshold)[0]
                if len(hits):
                    # The first hit is the best-ranked selected chunk it repeats.
                    j = int(hits[0])
                    skipped.append(Skipped(i, kept_positions[j], float(similar[j])))
                    continue
            kept[len(kept_positions)] = v
            kept_positions.append(i)
        selected.append(i)
    return selected, skipped


def document_timestamp(metadata: Optional[str]) -> Optional[float]:
    """The first usable RECENCY_KEYS value of a chunk's metadata JSON, or None."""
    if not metadata:
        return None
    try:
        values = json.loads(metadata)
    except ValueError:
        return None
    if not isinstance(values, dict):
        return None
    for key in RECENCY_KEYS:
        seconds = parse_timestamp(values.get(key))
        if seconds is not None:
            return seconds
    return None


def top_n(scores: np.ndarray, n: int, min_score: Optional[float] = None) -> list[int]:
    """Row numbers of the n highest scores, ties by row number.

    Args:
      scores: One score per row.
      n: How many to return at most.
      min_score: Rows scoring at or below this are left out.
    """
    rows = np.arange(len(scores))
    if min_score is not None:
        rows = rows[scores > min_score]
    order = np.lexsort((rows, -scores[rows]))
    return rows[order[:n]].tolist()


def bm25_scores(retriever, query_tokens: list[str], n_rows: int) -> np.ndarray:
    """BM25 score of every row for one tokenized query; zeros if no token is known."""
    if not query_tokens:
        return np.zeros(n_rows, np.float32)
    return np.asarray(retriever.get_scores(query_tokens), np.float32)


# --- the evaluation's dense retrieval over a filtered chunk set (pipelines/evaluate/) ---


def exact_top_k(vectors: np.ndarray, rows: np.ndarray, queries: np.ndarray, k: int) -> list[list[int]]:
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
