"""ExactNorm (the study's `ExactNorm`): identical normalized text.

Holds the filter's decision, `drop_exact`, and its registry entry.
"""

from __future__ import annotations

from typing import Sequence

from transforms.dedup.keep import keep_order_key, kept_and_dropped
from transforms.dedup.registry import GROUPED, FilterDef
from transforms.types import Chunk, Dropped


def drop_exact(chunks: Sequence[Chunk]) -> tuple[list[Chunk], list[Dropped]]:
    """ExactNorm: drops chunks whose normalized text equals a kept chunk's.

    Compares `content_hash` (a hash of `normalize_text`) corpus-wide.

    Returns:
      `(kept, dropped)`; reason `exact`, score 1.0.
    """
    keeper: dict[str, int] = {}
    for i, chunk in enumerate(chunks):
        j = keeper.get(chunk.content_hash)
        if j is None or keep_order_key(chunk) < keep_order_key(chunks[j]):
            keeper[chunk.content_hash] = i
    dropped = {}
    for i, chunk in enumerate(chunks):
        j = keeper[chunk.content_hash]
        if j != i:
            dropped[i] = Dropped(chunk, 'exact', chunks[j].chunk_id, 1.0)
    return kept_and_dropped(chunks, dropped)


def content_hash_of(chunk) -> str:
    """The group key: the hash of the normalized text."""
    return chunk.content_hash


def decide(chunks, threshold, config):
    return drop_exact(chunks)


FILTER = FilterDef(
    name='exact', label='ExactNorm', position=0,
    removes='identical normalized text (NFKC, casefold, whitespace collapsed), corpus-wide',
    default=None, needs=frozenset(), strategy=GROUPED, decide=decide, group_key=content_hash_of,
    # A copy has no news of its own, but the chunk it copies may be dropped later as a near-copy.
    near_copy_reasons=frozenset({'exact'}))
