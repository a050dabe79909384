"""Score fusion of the query signals: convex combination of normalized scores, RRF, tie-breaking prior, relative floor.

Pure numpy functions over one query's candidates (arrays aligned on the
candidate list); `retrieval.fuse_candidates` wires them. The convex
combination is the one Bruch et al. ("An Analysis of Fusion Functions for
Hybrid Retrieval", ACM TOIS 2023) found better than reciprocal rank fusion
and tunable with few labelled queries: each signal's scores are normalized
over the candidates, then `alpha * dense + (1 - alpha) * bm25`. Salience and
recency do not depend on the question, so they never outweigh relevance:
they add at most `epsilon` times the best fused score, i.e. they only
reorder candidates whose fused scores are that close (`tie_break`).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

# The constant of Cormack et al. (2009): damps the gap between the first ranks.
RRF_K = 60
MINMAX = 'minmax'
TMM = 'tmm'
# Min-max whose dense low end is the relevance floor: cosines below it count 0 and do not
# compress the spread of those above it, while BM25 still counts for them.
MINMAX_FLOOR = 'minmax_floor'
NORMALIZATIONS = (MINMAX, TMM, MINMAX_FLOOR)
# The lowest score each signal can give (theoretical min-max, Bruch et al. Section 4.1):
# a cosine between unit vectors, and BM25 (no query term in the chunk).
THEORETICAL_MIN = {'dense': -1.0, 'bm25': 0.0}


def normalize(scores: np.ndarray, method: str, theoretical_min: float, floor: float = -np.inf) -> np.ndarray:
    """One signal's scores over the candidates, mapped to [0, 1].

    Args:
      scores: The raw scores of the candidates.
      method: `minmax`: `(s - min) / (max - min)` over the candidates;
        `tmm`: `(s - theoretical_min) / (max - theoretical_min)`, so a
        candidate's value does not depend on how bad the worst candidate is;
        `minmax_floor`: `minmax` with `min` raised to `floor` (scores below
        it count 0).
      theoretical_min: The lowest score the signal can give (`tmm`).
      floor: `minmax_floor`'s lowest score that counts.

    Returns:
      The normalized scores; all 0 when the candidates all score the same
      as the minimum (e.g. BM25 matched none of them), so the signal then
      orders nothing.

    Raises:
      ValueError: for an unknown method.
    """
    scores = np.asarray(scores, np.float64)
    if method not in NORMALIZATIONS:
        raise ValueError(f'unknown normalization {method!r}; choose among {list(NORMALIZATIONS)}')
    if not len(scores):
        return scores
    low = theoretical_min if method == TMM else float(scores.min())
    if method == MINMAX_FLOOR:
        low = max(low, floor)
    span = float(scores.max()) - low
    if span <= 0:
        return np.zeros_like(scores)
    return np.clip((scores - low) / span, 0.0, 1.0)


def convex_fuse(dense: np.ndarray, bm25: np.ndarray, alpha: float, method: str,
                dense_floor: float = -np.inf) -> np.ndarray:
    """`alpha * norm(dense) + (1 - alpha) * norm(bm25)` per candidate.

    Args:
      dense: Cosine of each candidate to the question.
      bm25: BM25 score of each candidate (0: no query term).
      alpha: Weight of the dense signal, in [0, 1].
      method: The normalization (`normalize`).
      dense_floor: `minmax_floor`: the cosine below which dense counts 0.
    """
    return (alpha * normalize(dense, method, THEORETICAL_MIN['dense'], dense_floor)
            + (1.0 - alpha) * normalize(bm25, method, THEORETICAL_MIN['bm25']))


def prior(salience: Sequence[Optional[float]], timestamps: Sequence[Optional[float]],
          weight_salience: float, weight_recency: float) -> np.ndarray:
    """The query-independent value of each candidate, in [0, 1]: salience and recency, weighted.

    Salience is already in [0, 1]; recency is min-max scaled over the
    candidates that have a timestamp (newest 1). A candidate without a value
    gets 0 from that signal (neutral: it is not raised).

    Args:
      salience: Salience per candidate, or None.
      timestamps: Document time per candidate (POSIX seconds), or None.
      weight_salience, weight_recency: The mix; both 0 gives all zeros.
    """
    n = len(salience)
    total = weight_salience + weight_recency
    if not n or total <= 0:
        return np.zeros(n)
    sal = np.array([min(max(float(s), 0.0), 1.0) if s is not None else 0.0 for s in salience])
    known = [t for t in timestamps if t is not None]
    rec = np.zeros(n)
    if known:
        low, high = min(known), max(known)
        rec = np.array([0.0 if t is None else (1.0 if high == low else (t - low) / (high - low)) for t in timestamps])
    return (weight_salience * sal + weight_recency * rec) / total


def tie_break(scores: np.ndarray, values: np.ndarray, epsilon: float) -> np.ndarray:
    """Fused scores raised by at most `epsilon` times the best one, in proportion to `values` (in [0, 1]).

    A candidate can only overtake another whose fused score is less than
    `epsilon * max(scores)` above its own: salience and recency reorder
    candidates of comparable relevance, never a clearly better one.
    """
    scores = np.asarray(scores, np.float64)
    if not len(scores) or epsilon <= 0:
        return scores
    best = float(scores.max())
    # All tied at 0 (nothing tells them apart): the prior alone orders them.
    scale = best if best > 0 else 1.0
    return scores + epsilon * scale * np.asarray(values, np.float64)


def relative_floor(scores: np.ndarray, fraction: float) -> np.ndarray:
    """Mask of the candidates whose fused score is at least `fraction` of the best one (0 keeps all)."""
    scores = np.asarray(scores, np.float64)
    if not len(scores) or fraction <= 0:
        return np.ones(len(scores), bool)
    return scores >= fraction * float(scores.max())


def rank(values: Mapping[str, Optional[float]]) -> dict[str, int]:
    """1-based ranks by value, highest first; equal values are ordered by id.

    Args:
      values: Value per chunk id; None means the chunk has no value (neutral).

    Returns:
      Rank per chunk id that has a value.
    """
    present = sorted((k for k, v in values.items() if v is not None), key=lambda k: (-values[k], k))
    return {k: i + 1 for i, k in enumerate(present)}


def rrf_fuse(
    rankings: Mapping[str, Mapping[str, int]],
    weights: Mapping[str, float],
    rrf_k: float = RRF_K,
) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: score(c) = sum over signals s of weight_s / (rrf_k + rank_s(c)).

    A chunk absent from a signal's ranking gets nothing from it.

    Args:
      rankings: Per signal name, the 1-based rank of each chunk id.
      weights: Per signal name, its weight; a signal without one weighs 0.
      rrf_k: The fusion constant.

    Returns:
      `(chunk_id, score)` for every ranked chunk, by score descending then
      chunk_id, so ties always come out in the same order.
    """
    scores: dict[str, float] = {}
    for signal, ranks in rankings.items():
        weight = weights.get(signal, 0.0)
        for chunk_id, r in ranks.items():
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (rrf_k + r)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
