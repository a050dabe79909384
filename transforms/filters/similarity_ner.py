"""Similarity + NER: similarity with a shared entity name (the study's `Similarity + NER`)."""

from transforms.filters.similarity import similarity_filter

FILTER = similarity_filter(
    'similarity_ner', 'Similarity + NER', 5, '... and at least one shared entity',
    same_topic=False, shared_entity=True)
