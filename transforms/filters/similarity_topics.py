"""Similarity + Topics: similarity within the same KMeans topic (the study's `Similarity + Topics`)."""

from transforms.filters.similarity import similarity_filter

FILTER = similarity_filter(
    'similarity_topics', 'Similarity + Topics', 4, '... and the same KMeans topic',
    same_topic=True, shared_entity=False)
