"""Lazy features: which feature is computed before which filter."""

import numpy as np
import pytest

from transforms import dedup
from transforms import filters
from transforms.features import ComputeFeatures, dropped_with_features, feature_plan
from transforms.types import Chunk, Dropped


def plan(filters: str):
    return feature_plan(dedup.FilterConfig(specs=tuple(dedup.parse_filters(filters))))


def test_each_feature_just_before_its_first_use():
    # The default cascade embeds only what exact and minhash keep.
    assert plan('cascade') == [(), ('minhash',), ('embedding',), ()]
    # The user's order holds: an embedding filter first embeds everything.
    assert plan('intra_doc,exact,minhash') == [('embedding',), (), ('minhash',), ()]
    assert plan('exact,ner_exact,similarity_topics') == [(), ('entities',), ('embedding', 'topics'), ()]
    assert plan('minhash,similarity_topics_ner') == [('minhash',), ('embedding', 'entities', 'topics'), ()]


def test_kept_chunks_are_embedded_when_no_filter_was():
    assert plan('none') == [('embedding',)]
    assert plan('exact,minhash') == [(), ('minhash',), ('embedding',)]
    assert plan('random') == [(), ('embedding',)]


def test_the_registry_declares_what_each_filter_needs():
    assert filters.get('similarity_topics').needs == {'embedding', 'topics'}
    assert filters.get('intra_doc').needs == {'embedding'} and filters.get('minhash').needs == {'minhash'}
    assert filters.get('exact').needs == frozenset() and filters.get('ner_half').needs == {'entities'}
    with pytest.raises(ValueError, match='topics cluster the embeddings'):
        filters.FilterDef('x', 'X', 'x', None, frozenset({'topics'}), filters.PER_CHUNK, decide=None)


def test_chunk_features_name_what_it_carries():
    chunk = Chunk('d#0', 'd', 0, 'text', 0, 4, 1, 'h')
    assert chunk.features() == []
    chunk = Chunk('d#0', 'd', 0, 'text', 0, 4, 1, 'h', embedding=np.zeros(2), topic=0, entities=())
    assert chunk.features() == ['embedding', 'entities', 'topics']


def test_compute_features_checks_its_arguments():
    config = dedup.FilterConfig()
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
