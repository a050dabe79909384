"""NER Half: at least half of a chunk's entity names in a kept chunk (the study's `NER Half`)."""

from transforms import dedup
from transforms.filters import PAIRS, FilterDef


def decide(chunks, threshold, config):
    return dedup.drop_ner_half(chunks)


def transform(index, spec, config):
    from transforms.filter_pairs import DropHalfEntityOverlaps

    return DropHalfEntityOverlaps(config, index)


FILTER = FilterDef(
    name='ner_half', label='NER Half', position=8,
    removes="at least half of its entities in a kept chunk's set (build: candidates from an "
            'inverted index on entity names)',
    default=None, needs=frozenset({'entities'}), strategy=PAIRS, decide=decide, beam_transform=transform)
