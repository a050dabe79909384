"""Ranking metrics of IR benchmarks (BEIR, MTEB): nDCG, recall, MRR, and group coverage.

Computed as `pytrec_eval` (trec_eval) computes them, which BEIR and MTEB
report: nDCG with linear gains (the qrels grade) and a log2 discount,
recall over the passages graded > 0, MRR the reciprocal rank of the first
of them. Every function here is pure and takes one query's ranking: its
corpus ids, best first, without repeats.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence


def ndcg_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG@k: DCG of the top k over the DCG of the ideal order; 0 without relevant passages."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]))
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(relevant.values(), reverse=True)[:k]))
    return dcg / ideal if ideal else 0.0


def recall_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the relevant passages in the top k."""
    return len(set(ranking[:k]) & set(relevant)) / len(relevant) if relevant else 0.0


def mrr_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant passage in the top k, 0 if none is."""
    return next((1.0 / (i + 1) for i, d in enumerate(ranking[:k]) if d in relevant), 0.0)


def group_coverage_at(ranking: Sequence[str], groups: Sequence[frozenset], k: int) -> float:
    """Share of the groups (facts) with at least one of their passages in the top k."""
    top = set(ranking[:k])
    return sum(1 for g in groups if g & top) / len(groups) if groups else 0.0


def all_groups_at(ranking: Sequence[str], groups: Sequence[frozenset], k: int) -> float:
    """1 when every group has a passage in the top k (all hops found), else 0."""
    return 1.0 if groups and group_coverage_at(ranking, groups, k) == 1.0 else 0.0


def documents_of(doc_ids: Iterable[str], exclude: str = '') -> list[str]:
    """A chunk ranking's documents, in order of their best chunk; `exclude` left out.

    BEIR drops a passage whose id equals the query's (`ignore_identical_ids`:
    ArguAna's queries are corpus passages), so `exclude` is the query id.
    """
    return [d for d in dict.fromkeys(doc_ids) if d != exclude]
