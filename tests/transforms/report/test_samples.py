"""Bounded samples of a run's tables: a few rows per group, the same whatever the order or sharding."""

import random

import pyarrow as pa

from transforms.report import samples


def rows(n=200):
    return [{'chunk_id': f'd{i % 7}#{i}', 'reason': ['exact', 'minhash'][i % 2], 'text': f't{i}'} for i in range(n)]


def test_n_rows_per_group_lowest_rank_first_whatever_the_order():
    data = rows()
    picked = samples.sample_by(data, lambda r: r['reason'], lambda r: r['chunk_id'], 3)
    shuffled = data[:]
    random.Random(1).shuffle(shuffled)
    assert picked == samples.sample_by(shuffled, lambda r: r['reason'], lambda r: r['chunk_id'], 3)
    assert list(picked) == ['exact', 'minhash'] and all(len(v) == 3 for v in picked.values())
    expected = sorted((r for r in data if r['reason'] == 'exact'), key=lambda r: samples.rank(r['chunk_id']))[:3]
    assert picked['exact'] == expected


def test_a_none_group_is_skipped_and_parts_stream():
    parts = [pa.Table.from_pylist(rows(10)), pa.Table.from_pylist(rows(4))]
    streamed = list(samples.rows_of(parts))
    assert len(streamed) == 14
    assert samples.sample_by(streamed, lambda r: None, lambda r: r['chunk_id'], 2) == {}


def test_long_texts_are_clipped():
    assert samples.clip('x' * 5000) == 'x' * samples.MAX_TEXT_CHARS + '…' and samples.clip(None) == ''


def test_a_built_run_is_sampled_with_its_keepers(sample_root):
    _, root = sample_root
    run = str(root / 'runs' / 'r1')
    sampled = samples.run_samples(run, 2)
    assert set(sampled['rejected']) == {'empty_text', 'missing_id'}
    assert set(sampled['dropped']) == {'exact'} and len(sampled['dropped']['exact']) == 2
    for row in sampled['dropped']['exact']:
        # An exact duplicate: its keeper's text is the same text.
        assert sampled['keepers'][row['duplicate_of']] == row['text']
    assert sampled['deltas'] == []
    assert samples.run_samples(run, 2) == sampled
