"""Similarity + Topics + NER: both conditions (the study's `Similarity + Topics + NER`)."""

from transforms.filters.similarity import similarity_filter

FILTER = similarity_filter(
    'similarity_topics_ner', 'Similarity + Topics + NER', 6, '... and both',
    same_topic=True, shared_entity=True)
