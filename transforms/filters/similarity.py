"""Similarity: cosine to an already kept chunk, greedy in keep order (the study's `Similarity`)."""

from transforms import dedup
from transforms.filters import PAIRS, FilterDef


def decide(chunks, threshold, config):
    return dedup.drop_similar(chunks, threshold, require_same_topic=False, require_shared_entity=False)


def transform(index, spec, config):
    from transforms.filter_pairs import DropSimilarPairs

    return DropSimilarPairs(spec, config, index, same_topic=False, shared_entity=False)


FILTER = FilterDef(
    name='similarity', label='Similarity', position=3,
    removes='cosine ≥ τ to an already kept chunk, greedy in keep order (build: candidates within the 3 nearest of n/500 seeded KMeans clusters, verified by exact cosine; evaluation: FAISS range search)',
    default=0.8, needs=frozenset(), strategy=PAIRS, decide=decide, beam_transform=transform)
