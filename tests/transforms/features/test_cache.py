"""The feature cache: entry tables, generations and the keyed join.

The join tests use hand-made chunks and cache entries: the unit under test is
the join, not the model, so no model runs here (see
tests/pipelines/build_index/test_incremental.py for builds with the real model).
"""

import dataclasses
import logging
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import flip_pages, rewrite_values
from transforms import progress
from transforms.features import cache as feature_cache
from transforms.features.cache import CacheRun
from transforms.features.cache_settings import CacheSpec
from transforms.output.writers import write_table
from transforms.text import text_key
from transforms.types import Chunk


def chunk(doc_id, index, text):
    return Chunk(f'{doc_id}#{index}', doc_id, index, text, 0, len(text), 3, 'h')


def unit_vector(seed, dim=384):
    v = np.random.default_rng(seed).standard_normal(dim)
    return (v / np.linalg.norm(v)).astype(np.float32)


@pytest.mark.parametrize('feature, values', [
    ('embedding', [unit_vector(0), unit_vector(1)]),
    ('minhash', [np.array([2**64 - 1, 0, 12345], np.uint64), np.array([1, 2, 3], np.uint64)]),
    ('entities', [('GPE:london', 'PERSON:ada lovelace'), ()]),
    ('spans', [((0, 120, 31), (100, 260, 40)), ()]),
])
def test_entries_round_trip_bit_exact(tmp_path, feature, values):
    entries = [('k2', values[1]), ('k1', values[0]), ('k2', values[1])]
    path = str(tmp_path / 'entries.parquet')
    write_table(feature_cache.entries_table(feature, entries), path)
    back = list(feature_cache.verified_entries(path, feature))
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


def test_generations_are_sharded_by_key_and_older_unverifiable_ones_are_not_read(tmp_path):
    spec = CacheSpec('minhash', {'num_perm': 4})
    entries = [(f'k{i}', np.arange(i, i + 4, dtype=np.uint64)) for i in range(30)]
    run = write_generation(tmp_path, spec, 'g1', entries + entries[:5], num_shards=3)
    generation = tmp_path / 'minhash' / spec.settings_id / 'g1'
    assert sorted(p.name for p in generation.glob('*.parquet')) == [
        f'part-0000{i}-of-00003.parquet' for i in range(3)]
    back = feature_cache.read_entries(str(generation), 'minhash')
    assert sorted(back) == sorted(k for k, _ in entries)
    assert all(back[k].tobytes() == v.tobytes() for k, v in entries)
    assert run.read_from == {}
    # A generation written before entries carried checksums: it cannot be verified, so it is not read.
    old = tmp_path / 'minhash' / spec.settings_id / 'g0'
    old.mkdir()
    write_table(feature_cache.entries_table('minhash', entries).drop(['check']),
                str(old / 'part-00000-of-00001.parquet'))
    (old / 'COMPLETE').write_bytes(b'')
    assert "has no column(s) ['check']" in feature_cache.generation_problem(str(old))


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
    vector = np.array([0.6, 0.8, 0.0], dtype=np.float32)
    write_generation(tmp_path, embedding, 'g1', [(text_key('cached text'), vector)])
    run = CacheRun.open(str(tmp_path), [embedding, entities], 'g2')  # no entities cached yet
    chunks = [chunk('a', 0, 'cached text'), chunk('b', 3, 'cached text'), chunk('a', 1, 'new text')]

    def summary(c):
        return c.chunk_id, None if c.embedding is None else c.embedding.tolist(), c.entities

    with TestPipeline() as p:
        out = p | beam.Create(chunks) | feature_cache.JoinCachedFeatures(run)
        assert_that(out | beam.Map(summary), equal_to([
            ('a#0', vector.tolist(), None), ('b#3', vector.tolist(), None), ('a#1', None, None)]))


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


def test_entries_whose_checksum_fails_are_misses_with_one_warning_naming_the_part(tmp_path, caplog):
    spec = CacheSpec('embedding', {'model': 'x'})
    entries = [(f'k{i}', unit_vector(i, 8)) for i in range(10)]
    write_generation(tmp_path, spec, 'g1', entries, num_shards=1)
    part = f'{spec.directory(str(tmp_path))}/g1/part-00000-of-00001.parquet'
    garbage = {'k1': lambda v: [-x for x in v], 'k2': lambda v: [float('nan')] * len(v),
               'k3': lambda v: [x * 1e31 for x in v]}
    rewrite_values(part, lambda k, v: garbage[k](v) if k in garbage else v)
    with caplog.at_level(logging.WARNING):
        back = dict(feature_cache.verified_entries(part, 'embedding'))
    assert sorted(back) == sorted(k for k, _ in entries if k not in garbage)
    assert all(np.asarray(back[k], np.float32).tobytes() == v.tobytes() for k, v in entries if k in back)
    [warning] = [r.getMessage() for r in caplog.records]
    assert part in warning and '3 entries fail their check' in warning and 'checksum mismatch' in warning


def test_an_implausible_embedding_is_not_used_even_with_a_valid_checksum(tmp_path):
    # Written so by a run that computed it (a broken kernel): the checksum holds, the vector does not.
    spec = CacheSpec('embedding', {'model': 'x'})
    write_generation(tmp_path, spec, 'g1', [('nan', np.full(4, np.nan, np.float32)),
                                             ('long', np.full(4, 1e15, np.float32)), ('ok', unit_vector(0, 4))])
    assert feature_cache.read_entries(f'{spec.directory(str(tmp_path))}/g1', 'embedding').keys() == {'ok'}


def test_pages_that_no_longer_decode_cost_their_entries_not_the_read(tmp_path, caplog):
    spec = CacheSpec('spans', {'chunker': 'x'})
    rng = np.random.default_rng(0)
    entries = [(f'k{i:03d}', tuple((int(a), int(a) + 50, 9) for a in rng.integers(0, 10**6, 40))) for i in range(300)]
    write_generation(tmp_path, spec, 'g1', entries, num_shards=1)
    part = f'{spec.directory(str(tmp_path))}/g1/part-00000-of-00001.parquet'
    flip_pages(part)
    assert feature_cache.generation_problem(os.path.dirname(part)) is None  # the footer still reads
    with caplog.at_level(logging.WARNING):
        back = feature_cache.read_entries(os.path.dirname(part), 'spans')
    expected = dict(entries)
    assert len(back) < len(entries) and all(expected[k] == v for k, v in back.items())
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f'feature cache part {part} is damaged')


def test_the_join_treats_a_damaged_entry_as_a_miss(tmp_path):
    spec = CacheSpec('embedding', {'model': 'x'})
    good, bad = np.array([0.6, 0.8, 0.0], np.float32), np.array([0.0, 0.6, 0.8], np.float32)
    write_generation(tmp_path, spec, 'g1', [(text_key('good'), good), (text_key('bad'), bad)], num_shards=1)
    rewrite_values(f'{spec.directory(str(tmp_path))}/g1/part-00000-of-00001.parquet',
                   lambda k, v: [0.0, 0.0, 1.0] if k == text_key('bad') else v)
    run = CacheRun.open(str(tmp_path), [spec], 'g2')
    with TestPipeline() as p:
        out = p | beam.Create([chunk('a', 0, 'good'), chunk('a', 1, 'bad')]) | feature_cache.JoinCachedFeatures(run)
        assert_that(out | beam.Map(lambda c: (c.chunk_id, None if c.embedding is None else c.embedding.tolist())),
                    equal_to([('a#0', good.tolist()), ('a#1', None)]))


def test_cache_parts_are_not_counted_as_the_builds_written_parts(tmp_path, monkeypatch):
    # The build's meter shows `write.parts` against the output tables' parts: a cache's would push it over.
    live = []
    monkeypatch.setattr(progress.Tally, 'count', lambda self, key, n=1: live.append(key))
    embedding = CacheSpec('embedding', {'model': 'x'})
    run = CacheRun.open(str(tmp_path), [embedding], 'g1', num_shards=2)
    vector = np.array([0.6, 0.8, 0.0], dtype=np.float32)
    p = TestPipeline()
    _ = p | beam.Create([dataclasses.replace(chunk('a', 0, 'some text'), embedding=vector)]) | feature_cache.WriteFeatureCache(run)
    result = p.run()
    result.wait_until_finish()
    counters = {f'{c.key.metric.namespace}.{c.key.metric.name}': c.committed
                for c in result.metrics().query()['counters']}
    assert progress.PARTS not in counters and counters['cache.parts'] == 2
    assert progress.PARTS not in live and live.count('cache.parts') == 2
