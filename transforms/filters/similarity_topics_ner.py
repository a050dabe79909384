"""Similarity + Topics + NER: cosine to an already kept chunk, greedy in keep order (the study's `Similarity + Topics + NER`)."""

from transforms import dedup
from transforms.filters import PAIRS, FilterDef


def decide(chunks, threshold, config):
    return dedup.drop_similar(chunks, threshold, require_same_topic=True, require_shared_entity=True)


def transform(index, spec, config):
    from transforms.filter_pairs import DropSimilarPairs

    return DropSimilarPairs(spec, config, index, same_topic=True, shared_entity=True)


FILTER = FilterDef(
    name='similarity_topics_ner', label='Similarity + Topics + NER', position=6,
    removes='... and both',
    default=0.8, needs=frozenset({'topics', 'entities'}), strategy=PAIRS, decide=decide, beam_transform=transform)
