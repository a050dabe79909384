"""Similarity: cosine to an already kept chunk, greedy in keep order (the study's `Similarity`)."""

from transforms import dedup
from transforms.filters import SCOPE, FilterDef


def decide(chunks, threshold, config):
    return dedup.drop_similar(chunks, threshold, require_same_topic=False, require_shared_entity=False)


FILTER = FilterDef(
    name='similarity', label='Similarity', position=3,
    removes='cosine ≥ τ to an already kept chunk (FAISS range search for candidates)',
    default=0.8, needs=frozenset(), strategy=SCOPE, decide=decide)
