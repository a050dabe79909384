"""The feature cache: entry tables, generations and the keyed join.

The join tests use hand-made chunks and cache entries: the unit under test is
the join, not the model, so no model runs here (see
tests/pipelines/build_index/test_incremental.py for builds with the real model).
"""

import logging
import os

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.features import cache as feature_cache
from transforms.features.cache import CacheRun
from transforms.features.cache_settings import CacheSpec
from transforms.output.writers import write_table
from transforms.text import text_key
from transforms.types import Chunk


def chunk(doc_id, index, text):
    return Chunk(f'{doc_id}#{index}', doc_id, index, text, 0, len(text), 3, 'h')


@pytest.mark.parametrize('feature, values', [
    ('embedding', [np.random.default_rng(0).standard_normal(384).astype(np.float32) for _ in range(2)]),
    ('minhash', [np.array([2**64 - 1, 0, 12345], np.uint64), np.array([1, 2, 3], np.uint64)]),
    ('entities', [('GPE:london', 'PERSON:ada lovelace'), ()]),
    ('spans', [((0, 120, 31), (100, 260, 40)), ()]),
])
def test_entries_round_trip_bit_exact(tmp_path, feature, values):
    entries = [('k2', values[1]), ('k1', values[0]), ('k2', values[1])]
    path = str(tmp_path / 'entries.parquet')
    write_table(feature_cache.entries_table(feature, entries), path)
    back = list(feature_cache.table_entries(pq.read_table(path)))
    assert [k for k, _ in back] == ['k1', 'k2']  # sorted, one row per key
    for (_, value), expected in zip(back, values):
        if feature == 'spans':
            assert feature_cache.typed_value(feature, value) == expected
            continue
        got = getattr(feature_cache.with_value(feature, chunk('d', 0, 't'), value), feature)
        if feature == 'entities':
            assert got == expected
        else:
            assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()


def test_split_generations_orders_complete_ones_by_completion_time():
    files = [('/s/b/entries.parquet', 1.0), ('/s/b/COMPLETE', 5.0), ('/s/c/entries.parquet', 9.0),
             ('/s/a/COMPLETE', 7.0)]
    assert feature_cache.split_generations(files) == (['/s/b', '/s/a'], ['/s/c'])


def write_generation(root, spec, generation, entries, complete=True, num_shards=2):
    run = CacheRun(str(root), (spec,), generation, {}, num_shards)
    run.write_entries(spec.feature, entries)
    if complete:
        run.commit()
    return run


def test_open_reads_the_newest_complete_generation_and_prune_keeps_only_its_own(tmp_path):
    spec = CacheSpec('entities', {'model': 'x'})
    assert CacheRun.open(str(tmp_path), [spec], 'g9').read_from == {'entities': None}
    write_generation(tmp_path, spec, 'g1', [('a', ('ORG:x',))])
    write_generation(tmp_path, spec, 'g2', [('a', ('ORG:y',))])
    write_generation(tmp_path, spec, 'g3', [('a', ('ORG:z',))], complete=False)  # a killed run
    run = CacheRun.open(str(tmp_path), [spec], 'g4')
    assert run.read_from['entities'] == f'{spec.directory(str(tmp_path))}/g2'
    assert feature_cache.read_entries(run.read_from['entities'], 'entities') == {'a': ('ORG:y',)}
    write_generation(tmp_path, spec, 'g4', [('a', ('ORG:w',))])
    run.prune()
    assert feature_cache.generations(spec.directory(str(tmp_path))) == (
        [f'{spec.directory(str(tmp_path))}/g4'], [])


def test_generations_are_sharded_by_key_and_older_single_files_still_read(tmp_path):
    spec = CacheSpec('minhash', {'num_perm': 4})
    entries = [(f'k{i}', np.arange(i, i + 4, dtype=np.uint64)) for i in range(30)]
    run = write_generation(tmp_path, spec, 'g1', entries + entries[:5], num_shards=3)
    generation = tmp_path / 'minhash' / spec.settings_id / 'g1'
    assert sorted(p.name for p in generation.glob('*.parquet')) == [
        f'part-0000{i}-of-00003.parquet' for i in range(3)]
    back = feature_cache.read_entries(str(generation), 'minhash')
    assert sorted(back) == sorted(k for k, _ in entries)
    assert all(back[k].tobytes() == v.tobytes() for k, v in entries)
    # A generation written before entries were sharded: one entries.parquet.
    legacy = tmp_path / 'legacy'
    legacy.mkdir()
    write_table(feature_cache.entries_table('minhash', entries), str(legacy / 'entries.parquet'))
    assert feature_cache.read_entries(str(legacy), 'minhash').keys() == back.keys()
    assert run.read_from == {}


def test_delete_incomplete_removes_only_killed_generations(tmp_path):
    spec = CacheSpec('minhash', {'num_perm': 4})
    write_generation(tmp_path, spec, 'g1', [('a', np.arange(4, dtype=np.uint64))])
    write_generation(tmp_path, spec, 'g2', [('a', np.arange(4, dtype=np.uint64))], complete=False)
    deleted = feature_cache.delete_incomplete(str(tmp_path))
    assert deleted == [f'{spec.directory(str(tmp_path))}/g2']
    assert feature_cache.generations(spec.directory(str(tmp_path))) == ([f'{spec.directory(str(tmp_path))}/g1'], [])
    assert feature_cache.delete_incomplete(str(tmp_path / 'missing')) == []


def test_join_attaches_cached_features_by_exact_text(tmp_path):
    embedding = CacheSpec('embedding', {'model': 'x'})
    entities = CacheSpec('entities', {'model': 'y'})
    vector = np.arange(3, dtype=np.float32)
    write_generation(tmp_path, embedding, 'g1', [(text_key('cached text'), vector)])
    run = CacheRun.open(str(tmp_path), [embedding, entities], 'g2')  # no entities cached yet
    chunks = [chunk('a', 0, 'cached text'), chunk('b', 3, 'cached text'), chunk('a', 1, 'new text')]

    def summary(c):
        return c.chunk_id, None if c.embedding is None else c.embedding.tolist(), c.entities

    with TestPipeline() as p:
        out = p | beam.Create(chunks) | feature_cache.JoinCachedFeatures(run)
        assert_that(out | beam.Map(summary), equal_to([
            ('a#0', [0.0, 1.0, 2.0], None), ('b#3', [0.0, 1.0, 2.0], None), ('a#1', None, None)]))


def test_a_damaged_generation_is_passed_over_for_the_newest_readable_one(tmp_path, caplog):
    spec = CacheSpec('entities', {'model': 'x'})
    write_generation(tmp_path, spec, 'g1', [('a', ('ORG:x',))])
    write_generation(tmp_path, spec, 'g2', [('a', ('ORG:y',))])
    directory = spec.directory(str(tmp_path))
    part = f'{directory}/g2/part-00001-of-00002.parquet'
    with open(part, 'wb') as f:
        f.write(b'junk')
    assert feature_cache.generation_problem(f'{directory}/g1') is None
    assert feature_cache.generation_problem(f'{directory}/g2').startswith(f'{part} is corrupt or unreadable')
    with caplog.at_level(logging.WARNING):
        assert CacheRun.open(str(tmp_path), [spec], 'g3').read_from == {'entities': f'{directory}/g1'}
    assert f'a feature cache generation cannot be read, so it is not used: {part}' in caplog.text
    for name in ('part-00000-of-00002.parquet', 'part-00001-of-00002.parquet'):
        os.remove(f'{directory}/g1/{name}')
    assert CacheRun.open(str(tmp_path), [spec], 'g3').read_from == {'entities': None}
