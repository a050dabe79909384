"""Similarity: cosine to an already kept chunk, greedy in keep order (the study's `Similarity`).

Also the family's shared definition (`similarity_filter`), used by
`similarity_topics`, `similarity_ner` and `similarity_topics_ner`, which add
a condition checked on each verified edge.
"""

import functools

from transforms import dedup
from transforms.filters import PAIRS, FilterDef


def decide(chunks, threshold, config, same_topic=False, shared_entity=False):
    return dedup.drop_similar(chunks, threshold, require_same_topic=same_topic, require_shared_entity=shared_entity)


def transform(index, spec, config, same_topic=False, shared_entity=False):
    from transforms.filter_pairs import DropSimilarPairs

    return DropSimilarPairs(spec, config, index, same_topic=same_topic, shared_entity=shared_entity)


def similarity_filter(name: str, label: str, position: int, removes: str,
                      same_topic: bool, shared_entity: bool) -> FilterDef:
    """A member of the similarity family: the same decision and Beam stage, with its conditions."""
    needs = (frozenset({'embedding'}) | frozenset({'topics'} if same_topic else set())
             | frozenset({'entities'} if shared_entity else set()))
    return FilterDef(
        name=name, label=label, position=position, removes=removes, default=0.8, needs=needs,
        strategy=PAIRS,
        decide=functools.partial(decide, same_topic=same_topic, shared_entity=shared_entity),
        beam_transform=functools.partial(transform, same_topic=same_topic, shared_entity=shared_entity))


FILTER = similarity_filter(
    'similarity', 'Similarity', 3,
    'cosine ≥ τ to an already kept chunk, greedy in keep order (build: candidates within the 3 nearest '
    'of n/500 seeded KMeans clusters, verified by exact cosine; evaluation: FAISS range search)',
    same_topic=False, shared_entity=False)
