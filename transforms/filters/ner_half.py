"""NER Half: at least half of a chunk's entity names in a kept chunk (the study's `NER Half`)."""

from transforms import dedup
from transforms.filters import SCOPE, FilterDef


def decide(chunks, threshold, config):
    return dedup.drop_ner_half(chunks)


FILTER = FilterDef(
    name='ner_half', label='NER Half', position=8,
    removes="at least half of its entities in a kept chunk's set",
    default=None, needs=frozenset({'entities'}), strategy=SCOPE, decide=decide)
