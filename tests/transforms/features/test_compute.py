"""The feature transforms (MinHash, entities, topics) on hand-made chunks, and the features a dropped chunk keeps.

The unit under test here is the Beam wiring, not the embedding model:
embeddings are small hand-made vectors. MinHash signatures and entities are
computed with the real libraries (datasketch, spaCy).
"""

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import OTHER, PARAGRAPH, TYPO, make, mixed_corpus, unit
from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.features.compute import (
    AssignTopics,
    ComputeFeatures,
    ComputeMinhash,
    dropped_with_features,
    with_topics,
)
from transforms.features.config import FeatureConfig
from transforms.features.minhash import MinHashConfig, signatures
from transforms.features.topics import topics
from transforms.types import Chunk, Dropped


def test_compute_features_checks_its_arguments():
    config = FeatureConfig()
    with pytest.raises(ValueError, match='unknown features'):
        ComputeFeatures(config, ('salience',))
    with pytest.raises(ValueError, match='needs the model'):
        ComputeFeatures(config, ('embedding',))


def test_a_dropped_chunk_keeps_only_the_features_the_plan_gave_it():
    # Cached values (here all four) beyond the plan are not reported, nor cached again.
    chunk = Chunk('d#0', 'd', 0, 'text', 0, 4, 1, 'h', embedding=np.zeros(2), entities=('ORG:x',),
                  minhash=np.ones(4, np.uint64), topic=1)
    out = dropped_with_features(Dropped(chunk, 'minhash', 'e#0', 0.9), ('minhash',))
    assert out.chunk.features() == ['minhash'] and out.chunk.embedding is None
    assert (out.reason, out.duplicate_of, out.score, out.chunk.text) == ('minhash', 'e#0', 0.9, 'text')


def minhash_of(chunk: Chunk) -> tuple:
    return chunk.chunk_id, tuple(int(v) for v in chunk.minhash)


def test_compute_minhash_equals_signatures():
    chunks = [make('d', 0, PARAGRAPH), make('d', 1, TYPO), make('d', 2, OTHER)]
    config = MinHashConfig(num_perm=32, shingle_size=2)
    sigs = signatures([c.text for c in chunks], config)
    expected = [(c.chunk_id, tuple(int(v) for v in s)) for c, s in zip(chunks, sigs)]
    with TestPipeline() as p:
        out = p | beam.Create(chunks) | ComputeMinhash(config) | 'Sigs' >> beam.Map(minhash_of)
        assert_that(out, equal_to(expected))


def features_of(chunk: Chunk) -> tuple:
    return chunk.chunk_id, chunk.entities, chunk.topic, chunk.minhash is not None


def test_compute_features_only_those_asked_for():
    chunks = [make('d', 0, PARAGRAPH, embedding=unit(1, 0)), make('d', 1, OTHER, embedding=unit(0, 1))]
    config = FilterConfig(specs=(FilterSpec('similarity_topics_ner'),), features=FeatureConfig(n_topics=2))
    with TestPipeline() as p:
        # The chunks carry their embedding already (as from the feature cache).
        out = (p | beam.Create(chunks) | ComputeFeatures(config.features, ('entities', 'topics'))
               | 'Features' >> beam.Map(features_of))
        topic_ids = [int(t) for t in topics(np.stack([c.embedding for c in chunks]), 2)]
        assert_that(out, equal_to([
            ('d#0', ('FAC:macarthur park', 'FAC:the tower building of', 'GPE:arkansas', 'GPE:little rock',
                     "GPE:little rock's", 'ORG:the little rock arsenal', 'ORG:the u.s. arsenal building'),
             topic_ids[0], False),
            ('d#1', ('GPE:japan', 'NORP:valkyria', 'ORG:media', 'ORG:nameless', 'PERSON:sega',
                     'PERSON:valkyria chronicles iii'), topic_ids[1], False),
        ]))


def test_topics_do_not_depend_on_arrival_order():
    chunks = mixed_corpus()
    a = {c.chunk_id: c.topic for c in with_topics(chunks, 3, 0)}
    b = {c.chunk_id: c.topic for c in with_topics(chunks[::-1], 3, 0)}
    assert a == b and len(set(a.values())) == 3
    with TestPipeline() as p:
        out = p | beam.Create(chunks[::-1]) | AssignTopics(3, 0) | 'Topics' >> beam.Map(topic_of)
        assert_that(out, equal_to(sorted(a.items())))


def topic_of(chunk: Chunk) -> tuple:
    return chunk.chunk_id, chunk.topic
