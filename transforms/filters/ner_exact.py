"""NER Exact: the same non-empty entity-name set as a kept chunk (the study's `NER Exact`)."""

from typing import Optional

from transforms import dedup
from transforms.entities import entity_names
from transforms.filters import GROUPED, FilterDef


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
    return dedup.drop_ner_exact(chunks)


FILTER = FilterDef(
    name='ner_exact', label='NER Exact', position=7,
    removes='the same non-empty entity set as a kept chunk',
    default=None, needs=frozenset({'entities'}), strategy=GROUPED, decide=decide,
    group_key=entity_set_key)
