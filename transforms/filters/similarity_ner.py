"""Similarity + NER: cosine to an already kept chunk, greedy in keep order (the study's `Similarity + NER`)."""

from transforms import dedup
from transforms.filters import PAIRS, FilterDef


def decide(chunks, threshold, config):
    return dedup.drop_similar(chunks, threshold, require_same_topic=False, require_shared_entity=True)


def transform(index, spec, config):
    from transforms.filter_pairs import DropSimilarPairs

    return DropSimilarPairs(spec, config, index, same_topic=False, shared_entity=True)


FILTER = FilterDef(
    name='similarity_ner', label='Similarity + NER', position=5,
    removes='... and at least one shared entity',
    default=0.8, needs=frozenset({'entities'}), strategy=PAIRS, decide=decide, beam_transform=transform)
