"""Random: a seeded random share of chunks, the study's control."""

from transforms import dedup
from transforms.filters import PER_CHUNK, FilterDef


def decide(chunks, threshold, config):
    return dedup.drop_random(chunks, threshold, config.random_seed)


FILTER = FilterDef(
    name='random', label='random', position=2,
    removes="a seeded random share of chunks (the study's control)",
    default=0.5, threshold_note='(ratio)', needs=frozenset(), strategy=PER_CHUNK, decide=decide)
