"""NER Exact: the same non-empty entity-name set as a kept chunk (the study's `NER Exact`).

Holds the filter's decision, `drop_ner_exact`, and its registry entry.
"""

from __future__ import annotations

from typing import Optional, Sequence

from transforms.dedup.keep import keep_order, kept_and_dropped, require_field
from transforms.dedup.registry import GROUPED, FilterDef
from transforms.features.entities import entity_names
from transforms.types import Chunk, Dropped


def drop_ner_exact(chunks: Sequence[Chunk]) -> tuple[list[Chunk], list[Dropped]]:
    """NER Exact: drops a chunk whose entity-name set equals a kept chunk's.

    Set equality is transitive, so greedy in keep order means one chunk kept
    per distinct non-empty set. Chunks without entities are always kept.

    Returns:
      `(kept, dropped)`; reason `ner_exact`, score 1.0.

    Raises:
      ValueError: If a chunk's `entities` were never extracted (None).
    """
    require_field(chunks, 'entities')
    first: dict[frozenset[str], int] = {}
    dropped = {}
    for i in keep_order(chunks):
        names = entity_names(chunks[i].entities)
        if not names:
            continue
        if names in first:
            dropped[i] = Dropped(chunks[i], 'ner_exact', chunks[first[names]].chunk_id, 1.0)
        else:
            first[names] = i
    return kept_and_dropped(chunks, dropped)


def entity_set_key(chunk) -> Optional[str]:
    """The group key: the sorted entity names; None (kept, never grouped) for none.

    Raises:
      ValueError: If the chunk's entities were never extracted.
    """
    if chunk.entities is None:
        raise ValueError(f'chunk {chunk.chunk_id} has no entities')
    names = entity_names(chunk.entities)
    return '\x1f'.join(sorted(names)) if names else None


def decide(chunks, threshold, config):
    return drop_ner_exact(chunks)


FILTER = FilterDef(
    name='ner_exact', label='NER Exact', position=7,
    removes='the same non-empty entity set as a kept chunk',
    default=None, needs=frozenset({'entities'}), strategy=GROUPED, decide=decide,
    group_key=entity_set_key)
