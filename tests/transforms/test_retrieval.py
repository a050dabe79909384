"""Pure query-time ranking: ranks, reciprocal rank fusion, dedup, timestamps, BM25 files."""

import json

import numpy as np
import pytest

from transforms import retrieval


def unit(*v):
    v = np.asarray(v, np.float32)
    return v / np.linalg.norm(v)


def test_rank_orders_by_value_then_id_and_skips_missing():
    assert retrieval.rank({'b': 0.5, 'a': 0.5, 'c': 0.9, 'd': None}) == {'c': 1, 'a': 2, 'b': 3}
    assert retrieval.rank({}) == {}


def test_rrf_fuse_on_hand_made_rankings():
    rankings = {'dense': {'a': 1, 'b': 2, 'c': 3}, 'bm25': {'c': 1, 'a': 2}, 'salience': {'b': 1}}
    weights = {'dense': 1.0, 'bm25': 1.0, 'salience': 0.5}
    fused = retrieval.rrf_fuse(rankings, weights, rrf_k=60)
    expected = {
        'a': 1 / 61 + 1 / 62,
        'b': 1 / 62 + 0.5 / 61,
        'c': 1 / 63 + 1 / 61,
    }
    assert [c for c, _ in fused] == sorted(expected, key=lambda c: -expected[c])
    for chunk_id, score in fused:
        assert score == pytest.approx(expected[chunk_id])


def test_rrf_fuse_ties_break_by_chunk_id_and_zero_weight_ignores_a_signal():
    # Mirror-image rankings give equal scores: chunk_id decides, whatever the input order.
    fused = retrieval.rrf_fuse({'dense': {'z': 1, 'y': 2}, 'bm25': {'y': 1, 'z': 2}}, {'dense': 1, 'bm25': 1})
    assert [c for c, _ in fused] == ['y', 'z']
    assert fused[0][1] == fused[1][1]
    fused = retrieval.rrf_fuse({'dense': {'a': 2, 'b': 1}, 'recency': {'a': 1}}, {'dense': 1, 'recency': 0})
    assert [c for c, _ in fused] == ['b', 'a']


def test_dedup_skips_near_duplicates_of_selected_in_rank_order():
    vectors = [unit(1, 0, 0), unit(1, 0.1, 0), unit(0, 1, 0), unit(0.05, 1, 0), unit(0, 0, 1)]
    selected, skipped = retrieval.dedup_ranked(vectors, threshold=0.9)
    assert selected == [0, 2, 4]
    assert [(s.position, s.duplicate_of) for s in skipped] == [(1, 0), (3, 2)]
    assert skipped[0].cosine == pytest.approx(float(vectors[0] @ vectors[1]))


def test_dedup_threshold_is_inclusive_and_limit_stops_the_walk():
    a = unit(1, 0)
    b = unit(np.cos(np.arccos(0.9) - 1e-4), np.sin(np.arccos(0.9) - 1e-4))  # cosine just above 0.9
    assert retrieval.dedup_ranked([a, b], threshold=0.9)[0] == [0]
    assert retrieval.dedup_ranked([a, b], threshold=0.95)[0] == [0, 1]
    vectors = [unit(1, 0, 0), unit(0, 1, 0), unit(1, 0.01, 0), unit(0, 0, 1)]
    selected, skipped = retrieval.dedup_ranked(vectors, threshold=0.9, limit=2)
    assert selected == [0, 1] and skipped == []


def test_dedup_keeps_chunks_without_embedding():
    v = unit(1, 0)
    assert retrieval.dedup_ranked([v, None, v], threshold=0.9)[0] == [0, 1]


@pytest.mark.parametrize('value,expected', [
    ('2024-05-01T10:00:00Z', 1714557600.0),
    ('2024-05-01T12:00:00+02:00', 1714557600.0),
    ('2024-05-01T10:00:00', 1714557600.0),  # no zone: UTC
    ('2024-05-01', 1714521600.0),
    (1714557600, 1714557600.0),
    ('yesterday', None),
    ('', None),
    (True, None),
    (None, None),
    ({'y': 2024}, None),
])
def test_parse_timestamp(value, expected):
    assert retrieval.parse_timestamp(value) == expected


def test_document_timestamp_reads_the_first_usable_key():
    assert retrieval.document_timestamp(json.dumps({'updated_at': '2024-05-01', 'date': '2020-01-01'})) == 1714521600.0
    assert retrieval.document_timestamp(json.dumps({'updated_at': 'soon', 'date': '2024-05-01'})) == 1714521600.0
    for metadata in [None, '', '{bad', '[1, 2]', json.dumps({'lang': 'en'})]:
        assert retrieval.document_timestamp(metadata) is None


def test_top_n_ties_by_row_and_min_score():
    scores = np.array([0.0, 2.0, 1.0, 2.0, 0.0], np.float32)
    assert retrieval.top_n(scores, 3) == [1, 3, 2]
    assert retrieval.top_n(scores, 10, min_score=0.0) == [1, 3, 2]


def test_bm25_files_are_deterministic_and_score_lexical_matches(tmp_path):
    import bm25s

    texts = ['Cook the pasta in salted water.', 'A satellite in low Earth orbit.', 'The orbit burn.']
    files = retrieval.bm25_files(texts)
    assert files == retrieval.bm25_files(texts)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    index = bm25s.BM25.load(str(tmp_path), show_progress=False)
    tokens = retrieval.bm25_tokenize(['orbit of a satellite'], return_ids=False)[0]
    scores = retrieval.bm25_scores(index, tokens, len(texts))
    assert scores[0] == 0 and scores[1] > scores[2] > 0
    assert not retrieval.bm25_scores(index, [], len(texts)).any()
    with pytest.raises(ValueError, match='no texts'):
        retrieval.bm25_files([])


def test_bm25_of_batches_equals_bm25_of_all_texts_at_once():
    texts = ['Cook the pasta in salted water.', 'A satellite in low Earth orbit.', 'The orbit burn.',
             'Salted water boils later.', '', 'Pasta, orbit, satellite: new words and old.']
    batched = retrieval.bm25_files_of_batches([texts[:2], [], texts[2:5], texts[5:]])
    assert batched == retrieval.bm25_files(texts)
    with pytest.raises(ValueError, match='no texts'):
        retrieval.bm25_files_of_batches([[], []])


@pytest.mark.parametrize('kwargs,message', [
    ({'candidates': 0}, 'candidates'),
    ({'min_relevance': 2.0}, 'min_relevance'),
    ({'dedup_threshold': 0.0}, 'dedup_threshold'),
    ({'rrf_k': 0}, 'rrf_k'),
    ({'weight_bm25': -1.0}, 'weight_bm25'),
])
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        retrieval.RetrievalConfig(**kwargs)
