"""Pure query-time ranking: ranks, reciprocal rank fusion, dedup, timestamps, exact top-k."""

import json

import numpy as np
import pytest

from tests.helpers import _chunk
from transforms.ingest.records import parse_timestamp
from transforms.query import retrieval


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


def test_document_timestamp_reads_the_first_usable_key():
    assert retrieval.document_timestamp(json.dumps({'updated_at': '2024-05-01', 'date': '2020-01-01'})) == 1714521600.0
    assert retrieval.document_timestamp(json.dumps({'updated_at': 'soon', 'date': '2024-05-01'})) == 1714521600.0
    for metadata in [None, '', '{bad', '[1, 2]', json.dumps({'lang': 'en'})]:
        assert retrieval.document_timestamp(metadata) is None


def test_top_n_ties_by_row_and_min_score():
    scores = np.array([0.0, 2.0, 1.0, 2.0, 0.0], np.float32)
    assert retrieval.top_n(scores, 3) == [1, 3, 2]
    assert retrieval.top_n(scores, 10, min_score=0.0) == [1, 3, 2]


@pytest.mark.parametrize('kwargs,message', [
    ({'candidates': 0}, 'candidates'),
    ({'min_relevance': 2.0}, 'min_relevance'),
    ({'dedup_threshold': 0.0}, 'dedup_threshold'),
    ({'rrf_k': 0}, 'rrf_k'),
    ({'weight_bm25': -1.0}, 'weight_bm25'),
    ({'floor_exempt_bm25': -1}, 'floor_exempt_bm25 must be a whole number >= 0'),
    ({'floor_exempt_bm25': 2.5}, 'floor_exempt_bm25 must be a whole number >= 0'),
])
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        retrieval.RetrievalConfig(**kwargs)


@pytest.mark.parametrize('value', [10**400, -10**400, float('nan'), float('inf'), 1e300, True])
def test_recency_values_no_date_can_hold_are_neutral_at_query_time(value):
    # Indexes built before build-time validation may hold them: queries must not fail.
    assert parse_timestamp(value) is None
    metadata = json.dumps({'updated_at': value if not isinstance(value, float) else str(value)})
    assert retrieval.document_timestamp(metadata) is None


def test_exact_top_k_is_exact_among_kept_rows():
    vectors = np.eye(4, dtype=np.float32)
    query = np.array([[0.9, 0.5, 0.1, 0.0]], dtype=np.float32)
    assert retrieval.exact_top_k(vectors, np.arange(4), query, 2) == [[0, 1]]
    # Row 0 was filtered out: the next best kept rows take its place.
    assert retrieval.exact_top_k(vectors, np.array([1, 2, 3]), query, 2) == [[1, 2]]
    assert retrieval.exact_top_k(vectors, np.array([3]), query, 5) == [[3]]
    assert retrieval.exact_top_k(vectors, np.array([], dtype=int), query, 5) == [[]]


def test_the_floor_spares_candidates_bm25_ranks_in_its_top_n():
    # Row 0: close to the query, no query term. Rows 1-2: far from it (cosine < 0.25), BM25 matches.
    embeddings = np.stack([unit(1, 0, 0), unit(0.1, 1, 0), unit(0.05, 0, 1)])
    query = unit(1, 0, 0)
    bm25 = np.array([0.0, 3.0, 1.0], np.float32)
    ids = ['near', 'lexical-first', 'lexical-second']

    def fused(**kwargs):
        config = retrieval.RetrievalConfig(**kwargs)
        return sorted(ids[r] for r in retrieval.fuse_candidates(
            query, [0, 1, 2], bm25, embeddings, ids, [None] * 3, [None] * 3, config).rows)

    assert fused() == ['lexical-first', 'lexical-second', 'near']  # BM25's top 5 is exempt
    assert fused(floor_exempt_bm25=1) == ['lexical-first', 'near']
    assert fused(floor_exempt_bm25=0) == ['near']  # klarRAG: the floor on every candidate
