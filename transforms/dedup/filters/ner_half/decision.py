"""NER Half: at least half of a chunk's entity names in a kept chunk (the study's `NER Half`).

Holds the filter's in-memory decision, `drop_ner_half`, and its registry
entry; the build's Beam stage is `ner_half.stage.DropHalfEntityOverlaps`.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable, Sequence

from transforms.dedup.keep import keep_order, kept_and_dropped, require_field
from transforms.dedup.registry import PAIRS, FilterDef
from transforms.features.entities import entity_names
from transforms.types import Chunk, Dropped


def drop_ner_half(chunks: Sequence[Chunk]) -> tuple[list[Chunk], list[Dropped]]:
    """NER Half: drops a chunk when a kept chunk has at least half of its entity names.

    Greedy in keep order: the overlap `|E(c) & E(k)| / |E(c)|` is counted for
    kept chunks `k` only, found through an inverted index from entity name to
    the kept chunks that have it. Chunks without entities are always kept.

    Returns:
      `(kept, dropped)`; reason `ner_half`; duplicate_of is the kept chunk
      with the largest overlap (earliest in keep order on ties), score the
      overlap fraction.

    Raises:
      ValueError: If a chunk's `entities` were never extracted (None).
    """
    require_field(chunks, 'entities')
    postings: dict[str, list[int]] = collections.defaultdict(list)
    rank: dict[int, int] = {}
    dropped = {}
    for r, i in enumerate(keep_order(chunks)):
        names = entity_names(chunks[i].entities)
        if not names:
            continue
        counts = collections.Counter(j for name in names for j in postings.get(name, ()))
        best = min(counts.items(), key=lambda kv: (-kv[1], rank[kv[0]]), default=None)
        if best is not None and best[1] / len(names) >= 0.5:
            j, shared = best
            dropped[i] = Dropped(chunks[i], 'ner_half', chunks[j].chunk_id, shared / len(names))
            continue
        rank[i] = r
        for name in names:
            postings[name].append(i)
    return kept_and_dropped(chunks, dropped)


def decide(chunks, threshold, config):
    return drop_ner_half(chunks)


FILTER = FilterDef(
    name='ner_half', label='NER Half', position=8,
    removes="at least half of its entities in a kept chunk's set (build: candidates from an "
            'inverted index on entity names)',
    default=None, needs=frozenset({'entities'}), strategy=PAIRS, decide=decide)

# A posting (the chunks of one entity name) longer than this is hot (`US`,
# `Python`): each member is then compared only with the posting's first
# MAX_POSTING members in keep order, O(n) instead of O(n^2), and counted.
MAX_POSTING = 2_000


@dataclasses.dataclass(frozen=True)
class NerMember:
    """What a posting holds of a chunk: its id, keep key and entity names."""

    chunk_id: str
    keep_key: tuple
    names: frozenset


def half_overlap_edges(
    members: Iterable[NerMember], max_posting: int = MAX_POSTING
) -> tuple[list[tuple[str, tuple, str, tuple, float]], bool]:
    """NER Half's verified edges within one posting.

    A later chunk (keep order) may be dropped by an earlier one holding at
    least half of its names: the edge's score is that share. Members are
    compared with every earlier member, or with the first `max_posting` only
    in a hot posting.

    Returns:
      `(edges, capped)`: edges `(later_id, later_key, earlier_id, earlier_key,
      share)`, and whether the posting was hot.
    """
    ordered = sorted({m.chunk_id: m for m in members}.values(), key=lambda m: (m.keep_key, m.chunk_id))
    edges = []
    for y in range(1, len(ordered)):
        late = ordered[y]
        for x in range(min(y, max_posting)):
            early = ordered[x]
            share = len(late.names & early.names) / len(late.names)
            if share >= 0.5:
                edges.append((late.chunk_id, late.keep_key, early.chunk_id, early.keep_key, share))
    return edges, len(ordered) > max_posting + 1
