"""NER Half: at least half of a chunk's entity names in a kept chunk (the study's `NER Half`).

Holds the filter's in-memory decision, `drop_ner_half`, and its registry
entry; the build's Beam stage is `filter_pairs.DropHalfEntityOverlaps`.
"""

from __future__ import annotations

import collections
from typing import Sequence

from transforms.dedup import keep_order, kept_and_dropped, require_field
from transforms.entities import entity_names
from transforms.filters import PAIRS, FilterDef
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


def transform(index, spec, config):
    from transforms.filter_pairs import DropHalfEntityOverlaps

    return DropHalfEntityOverlaps(config, index)


FILTER = FilterDef(
    name='ner_half', label='NER Half', position=8,
    removes="at least half of its entities in a kept chunk's set (build: candidates from an "
            'inverted index on entity names)',
    default=None, needs=frozenset({'entities'}), strategy=PAIRS, decide=decide, beam_transform=transform)
