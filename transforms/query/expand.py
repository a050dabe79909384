"""Covered chunks at query time: a hit comes back with the spans of the covered chunks it holds.

`covered` drops a chunk whose text its kept neighbours hold; retrieval then
needs two adjacent kept chunks where the dropped one held an answer whole.
Expanding a hit to its own span plus those of the covered chunks it holds
(`duplicate_of` it, `covered_*`) returns the dropped chunk's text with it,
read from the kept neighbour: no index entry is added, only returned text.
"""

from __future__ import annotations

import collections
from typing import Iterable, Sequence

from transforms.dedup.filters.covered import REASONS as COVERED_REASONS
from transforms.types import Dropped

Span = tuple[int, int]


def covered_held(dropped: Iterable[Dropped]) -> dict[str, list[str]]:
    """`{holder chunk_id: chunk_ids of the covered chunks it holds}`, each list in chunk order.

    Only `covered` drops count: a copy dropped by another filter may lie in
    another document, and its text is already the keeper's.
    """
    held = collections.defaultdict(list)
    for d in sorted(dropped, key=lambda d: d.chunk.sort_key()):
        if d.reason in COVERED_REASONS and d.duplicate_of is not None:
            held[d.duplicate_of].append(d.chunk.chunk_id)
    return dict(held)


def expanded_span(span: Span, held: Sequence[Span]) -> Span:
    """The hit's span grown to take in the spans it holds, which overlap it (one range, no gap)."""
    start, end = span
    for s, e in held:
        start, end = min(start, s), max(end, e)
    return start, end
