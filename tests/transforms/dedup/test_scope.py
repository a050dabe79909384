"""Dedup scope: keys, partitions, and every filter kept inside its scope (pure and Beam).

Embeddings are small hand-made vectors (the unit under test is the grouping,
not the model); MinHash signatures are computed with datasketch.
"""

import dataclasses
import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import (
    PARAGRAPH,
    TYPO,
    chunk_id_of,
    decision_of,
    expect,
    make,
    run_filter,
    sorted_decisions,
    unit,
    with_minhash,
)
from transforms.dedup.config import FilterConfig, FilterSpec, parse_filters
from transforms.dedup.filters.minhash.stage import DropNearDuplicates
from transforms.dedup.filters.similarity.stage import DropSimilarPairs
from transforms.dedup.in_memory import apply_filter
from transforms.dedup.scope import UNSCOPED, parse_scope, partition, scope_key
from transforms.dedup.stages import DropByKey, FilterChunks


def tenant(chunk, value=..., **extra):
    meta = dict(extra)
    if value is not ...:
        meta['tenant'] = value
    return dataclasses.replace(chunk, metadata=json.dumps(meta, sort_keys=True) if meta else None)


def test_parse_scope():
    assert parse_scope('') == () and parse_scope(None) == ()
    assert parse_scope('tenant, release,tenant') == ('release', 'tenant')
    with pytest.raises(ValueError, match='empty metadata key'):
        parse_scope('tenant,,release')


def test_missing_key_is_its_own_value_distinct_from_null():
    keys = ('tenant',)
    missing, null, a = scope_key(None, keys), scope_key('{"tenant": null}', keys), scope_key('{"tenant": "a"}', keys)
    assert len({missing, null, a, scope_key('{"tenant": "null"}', keys)}) == 4
    assert scope_key('{"other": 1}', keys) == missing
    assert scope_key('{"tenant": "a", "x": 2}', keys) == a
    assert scope_key('{"tenant": "a"}', ()) == UNSCOPED


def test_partition_by_scope():
    chunks = [tenant(make('a', 0), 'x'), tenant(make('b', 0)), tenant(make('c', 0), 'x')]
    parts = partition(chunks, ('tenant',))
    assert sorted([c.doc_id for c in p] for p in parts) == [['a', 'c'], ['b']]


def scoped_corpus():
    """The same texts in two tenants (and one without a tenant): duplicates only within each."""
    chunks = []
    for t in ('a', 'b', ...):
        name = 'none' if t is ... else t
        chunks += [
            tenant(make(f'{name}1', 0, PARAGRAPH, embedding=unit(1, 0, 0)), t),
            tenant(make(f'{name}2', 0, PARAGRAPH, embedding=unit(1, 0, 0)), t),
            tenant(make(f'{name}3', 0, TYPO, embedding=unit(1, 0.01, 0)), t),
        ]
    return with_minhash(chunks)


CONFIG = FilterConfig(scope=('tenant',))


@pytest.mark.parametrize('name', ['exact', 'minhash', 'similarity'])
def test_no_filter_drops_across_scopes(name):
    chunks = scoped_corpus()
    by_id = {c.chunk_id: c for c in chunks}
    kept, dropped = apply_filter(chunks, FilterSpec(name), CONFIG)
    assert {c.metadata for c in kept} == {c.metadata for c in chunks}
    assert dropped and all(by_id[d.duplicate_of].metadata == d.chunk.metadata for d in dropped)
    # Unscoped, the same texts across tenants are duplicates of one another.
    _, unscoped = apply_filter(chunks, FilterSpec(name))
    assert any(by_id[d.duplicate_of].metadata != d.chunk.metadata for d in unscoped)


def test_beam_filters_with_scope_match_the_pure_ones():
    chunks = scoped_corpus()
    run_filter(chunks, DropByKey(FilterSpec('exact'), CONFIG))(
        *expect(apply_filter(chunks, FilterSpec('exact'), CONFIG)))
    b, r = CONFIG.features.minhash_config(0.8).bands()
    run_filter(chunks, DropNearDuplicates(0.8, b, r, 0, CONFIG.scope))(
        *expect(apply_filter(chunks, FilterSpec('minhash'), CONFIG)))
    spec = FilterSpec('similarity')
    run_filter(chunks, DropSimilarPairs(spec, CONFIG, 0))(*expect(apply_filter(chunks, spec, CONFIG)))



def test_filter_chunks_with_scope_matches_the_pure_cascade():
    chunks = scoped_corpus()
    config = dataclasses.replace(CONFIG, specs=tuple(parse_filters('exact,minhash,intra_doc')))
    expected_dropped = []
    current = chunks
    for spec in config.specs:
        current, dropped = apply_filter(current, spec, config)
        expected_dropped += dropped
    with TestPipeline() as p:
        out = p | beam.Create(chunks, reshuffle=False) | FilterChunks(config)
        assert_that(out['kept'] | 'Ids' >> beam.Map(chunk_id_of),
                    equal_to([c.chunk_id for c in current]), label='Kept')
        assert_that(out['dropped'] | 'Decisions' >> beam.Map(decision_of),
                    equal_to(sorted_decisions(expected_dropped)), label='Dropped')


def test_scope_settings_are_validated():
    with pytest.raises(ValueError, match='scope'):
        FilterConfig(scope=('b', 'a'))
    with pytest.raises(ValueError, match='semantic_deltas'):
        FilterConfig(deltas=False, semantic_deltas=True)
