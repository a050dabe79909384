"""Similarity + Topics: cosine to an already kept chunk, greedy in keep order (the study's `Similarity + Topics`)."""

from transforms import dedup
from transforms.filters import PAIRS, FilterDef


def decide(chunks, threshold, config):
    return dedup.drop_similar(chunks, threshold, require_same_topic=True, require_shared_entity=False)


def transform(index, spec, config):
    from transforms.filter_pairs import DropSimilarPairs

    return DropSimilarPairs(spec, config, index, same_topic=True, shared_entity=False)


FILTER = FilterDef(
    name='similarity_topics', label='Similarity + Topics', position=4,
    removes='... and the same KMeans topic',
    default=0.8, needs=frozenset({'topics'}), strategy=PAIRS, decide=decide, beam_transform=transform)
