"""Random: a seeded random share of chunks, the study's control.

Holds the filter's per-chunk draw (`random_unit`), its decision (`drop_random`)
and its registry entry.
"""

from __future__ import annotations

from typing import Sequence

from transforms.dedup.keep import kept_and_dropped
from transforms.dedup.registry import PER_CHUNK, FilterDef
from transforms.hashing import stable_hash
from transforms.types import Chunk, Dropped


def random_unit(chunk_id: str, seed: int) -> float:
    """Returns a uniform value in [0, 1) from a seeded blake2b of the chunk id.

    The same on every worker and run, unlike `hash()` or `random`.
    """
    return stable_hash(chunk_id, key=str(seed).encode('utf-8')) / 2.0**64


def drop_random(
    chunks: Sequence[Chunk], ratio: float = 0.5, seed: int = 0
) -> tuple[list[Chunk], list[Dropped]]:
    """Random control: drops each chunk independently with probability `ratio`.

    A chunk is dropped when `random_unit(chunk_id, seed) < ratio`, so the
    decision for a chunk depends on nothing else, and the dropped fraction is
    `ratio` in expectation (not exactly).

    Returns:
      `(kept, dropped)`; reason `random`, no duplicate_of or score.

    Raises:
      ValueError: If `ratio` is not in [0, 1].
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f'random ratio must be in [0, 1], got {ratio}')
    dropped = {
        i: Dropped(c, 'random')
        for i, c in enumerate(chunks)
        if random_unit(c.chunk_id, seed) < ratio
    }
    return kept_and_dropped(chunks, dropped)


def decide(chunks, threshold, config):
    return drop_random(chunks, threshold, config.random_seed)


FILTER = FilterDef(
    name='random', label='random', position=2,
    removes="a seeded random share of chunks (the study's control)",
    default=0.5, ratio=True, needs=frozenset(), strategy=PER_CHUNK, decide=decide)
