"""Pure query-time ranking: ranks, reciprocal rank fusion, dedup, timestamps, exact top-k."""

import json

import numpy as np
import pytest

from tests.helpers import _chunk
from transforms.ingest.records import parse_timestamp
from transforms.query import fusion, retrieval


def unit(*v):
    v = np.asarray(v, np.float32)
    return v / np.linalg.norm(v)


def test_rank_orders_by_value_then_id_and_skips_missing():
    assert fusion.rank({'b': 0.5, 'a': 0.5, 'c': 0.9, 'd': None}) == {'c': 1, 'a': 2, 'b': 3}
    assert fusion.rank({}) == {}


def test_rrf_fuse_on_hand_made_rankings():
    rankings = {'dense': {'a': 1, 'b': 2, 'c': 3}, 'bm25': {'c': 1, 'a': 2}, 'salience': {'b': 1}}
    weights = {'dense': 1.0, 'bm25': 1.0, 'salience': 0.5}
    fused = fusion.rrf_fuse(rankings, weights, rrf_k=60)
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
    fused = fusion.rrf_fuse({'dense': {'z': 1, 'y': 2}, 'bm25': {'y': 1, 'z': 2}}, {'dense': 1, 'bm25': 1})
    assert [c for c, _ in fused] == ['y', 'z']
    assert fused[0][1] == fused[1][1]
    fused = fusion.rrf_fuse({'dense': {'a': 2, 'b': 1}, 'recency': {'a': 1}}, {'dense': 1, 'recency': 0})
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
    ({'fusion': 'max'}, 'fusion must be one of'),
    ({'alpha': 1.5}, 'alpha must be in'),
    ({'normalization': 'zscore'}, 'normalization must be one of'),
    ({'relative_floor': -0.1}, 'relative_floor'),
    ({'prior': 'fused'}, "needs fusion='rrf'"),
    ({'prior': 'boost'}, 'prior must be one of'),
    ({'tie_epsilon': float('nan')}, 'tie_epsilon'),
    ({'floor_gate': 1.5}, 'floor_gate'),
    ({'below_floor': 'hide'}, 'below_floor must be one of'),
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
        config = retrieval.RetrievalConfig(min_relevance=0.25, below_floor='drop', **kwargs)
        return sorted(ids[r] for r in retrieval.fuse_candidates(
            query, [0, 1, 2], bm25, embeddings, ids, [None] * 3, [None] * 3, config).rows)

    assert fused() == ['lexical-first', 'lexical-second', 'near']  # BM25's top 5 is exempt
    assert fused(floor_exempt_bm25=1) == ['lexical-first', 'near']
    assert fused(floor_exempt_bm25=0) == ['near']  # klarRAG: the floor on every candidate


def _fuse(embeddings, query, bm25, ids, salience=None, timestamps=None, **kwargs):
    n = len(ids)
    config = retrieval.RetrievalConfig(**kwargs)
    fused = retrieval.fuse_candidates(query, list(range(n)), np.asarray(bm25, np.float32), np.stack(embeddings), ids,
                                      salience or [None] * n, timestamps or [None] * n, config)
    return [ids[r] for r in fused.rows], fused


def test_the_default_fuses_what_bm25_finds_and_dense_misses():
    # The second hop: far from the question in embedding space (cosine < 0.25), BM25's best.
    embeddings = [unit(1, 0, 0), unit(0.1, 1, 0), unit(0.7, 0.7, 0), unit(0.3, 0, 1)]
    ids = ['first-hop', 'second-hop', 'near-no-term', 'junk']
    order, fused = _fuse(embeddings, unit(1, 0, 0), [2.0, 5.0, 0.0, 0.1], ids)
    assert fused.cosines[1] < 0.25
    assert order[:2] == ['first-hop', 'second-hop']
    # The ranking before issue 40 drops it when BM25's top 5 does not spare it.
    assert 'second-hop' not in _fuse(embeddings, unit(1, 0, 0), [2.0, 5.0, 0.0, 0.1], ids, fusion='rrf',
                                      prior='fused', min_relevance=0.25, below_floor='drop', floor_exempt_bm25=0)[0]


def test_the_default_fuses_what_dense_finds_and_bm25_misses():
    # A paraphrase: no query term (BM25 0), the closest chunk in meaning.
    embeddings = [unit(1, 0.05, 0), unit(0.2, 1, 0), unit(0.3, 0, 1)]
    ids = ['paraphrase', 'lexical', 'weak']
    order, fused = _fuse(embeddings, unit(1, 0, 0), [0.0, 4.0, 1.0], ids)
    assert fused.rankings['bm25'].get('paraphrase') is None
    assert set(order[:2]) == {'paraphrase', 'lexical'}


def test_salience_does_not_reorder_unrelated_passages_but_breaks_near_ties():
    # 'related' is clearly more relevant; 'unrelated' is a one-chunk document (salience 1.0).
    embeddings = [unit(1, 0.1, 0), unit(0.2, 1, 0), unit(0.2, 0.9, 0.3)]
    ids = ['related', 'unrelated', 'also-weak']
    bm25 = [3.0, 0.2, 0.2]
    plain, _ = _fuse(embeddings, unit(1, 0, 0), bm25, ids)
    salient, fused = _fuse(embeddings, unit(1, 0, 0), bm25, ids, salience=[0.3, 1.0, 0.3])
    assert plain[0] == salient[0] == 'related'
    # Through RRF as a ranked signal (before issue 40), salience is worth as much as a rank.
    rrf, _ = _fuse(embeddings, unit(1, 0, 0), bm25, ids, salience=[0.3, 1.0, 0.3], fusion='rrf', prior='fused',
                   weight_salience=3.0)
    assert rrf[0] == 'unrelated'
    # Two equally relevant chunks: the salient one first.
    twins = [unit(1, 0, 0), unit(1, 0, 0), unit(0, 1, 0)]
    assert _fuse(twins, unit(1, 0, 0), [1.0, 1.0, 0.0], ['a', 'b', 'c'], salience=[0.2, 0.9, 1.0])[0] == ['b', 'a', 'c']


def test_rrf_with_salience_fused_is_the_ranking_before_issue_40():
    embeddings = [unit(1, 0.2, 0), unit(1, 0.5, 0), unit(0.5, 1, 0)]
    ids = ['a', 'b', 'c']
    order, fused = _fuse(embeddings, unit(1, 0, 0), [1.0, 2.0, 0.0], ids, salience=[None, 0.5, 1.0],
                         fusion='rrf', prior='fused', below_floor='drop', floor_gate=-1.0)
    expected = fusion.rrf_fuse(fused.rankings, retrieval.RetrievalConfig().weights)
    assert order == [c for c, _ in expected]
    assert fused.scores == pytest.approx([s for _, s in expected])


def test_the_relative_floor_drops_what_scores_far_below_the_best():
    embeddings = [unit(1, 0, 0), unit(0.9, 0.4, 0), unit(0, 0, 1)]
    ids = ['best', 'close', 'far']
    assert _fuse(embeddings, unit(1, 0, 0), [2.0, 1.8, 0.0], ids, min_relevance=-1.0,
                 relative_floor=0.5)[0] == ['best', 'close']


def test_below_the_floor_last_keeps_the_floored_order_then_the_rest():
    ids = ['a', 'b', 'c', 'd']
    embeddings = [unit(1, 0.2, 0), unit(0.6, 1, 0), unit(0.2, 1, 0.1), unit(0.1, 0, 1)]  # c and d below 0.25
    floor = dict(min_relevance=0.25, floor_exempt_bm25=0, normalization='minmax', alpha=0.5)
    dropped = _fuse(embeddings, unit(1, 0, 0), [1.0, 2.0, 3.0, 0.0], ids, below_floor='drop', **floor)[0]
    last = _fuse(embeddings, unit(1, 0, 0), [1.0, 2.0, 3.0, 0.0], ids, below_floor='last', **floor)[0]
    assert dropped == ['a', 'b']
    assert last[:2] == dropped and sorted(last) == ids  # nothing lost, the floored ranking first
    assert last[2] == 'c'  # below the floor, fused among themselves: c (BM25's best) before d
    scores = _fuse(embeddings, unit(1, 0, 0), [1.0, 2.0, 3.0, 0.0], ids, below_floor='last', **floor)[1].scores
    assert scores == sorted(scores, reverse=True) and scores[1] >= 0 > scores[2]


def test_the_floor_gate_floors_every_candidate_only_for_a_question_no_candidate_is_close_to():
    ids = ['a', 'b', 'c']
    gated = dict(min_relevance=0.25, floor_exempt_bm25=5, below_floor='last', floor_gate=0.4, normalization='minmax',
                 alpha=0.5)
    far = [unit(0.3, 1, 0), unit(0.2, 1, 0.1), unit(0.1, 0, 1)]  # best cosine < 0.3: off-topic
    # klarRAG's floor on every candidate: BM25's best ('b', cosine 0.2) is dropped too.
    assert _fuse(far, unit(1, 0, 0), [1.0, 2.0, 0.0], ids, **gated)[0] == ['a']
    near = [unit(1, 0.2, 0), unit(0.2, 1, 0.1), unit(0.1, 0, 1)]  # best cosine 0.98: on-topic, nothing dropped
    assert _fuse(near, unit(1, 0, 0), [1.0, 2.0, 0.0], ids, **gated)[0] == ['a', 'b', 'c']


def test_below_the_floor_keep_moves_nothing_of_an_on_topic_question_and_floors_an_off_topic_one():
    ids = ['a', 'b', 'c', 'd']
    embeddings = [unit(1, 0.2, 0), unit(0.6, 1, 0), unit(0.2, 1, 0.1), unit(0.1, 0, 1)]  # c and d below 0.25
    keep = dict(min_relevance=0.25, floor_exempt_bm25=0, below_floor='keep', floor_gate=0.35, normalization='minmax')
    unfloored = _fuse(embeddings, unit(1, 0, 0), [1.0, 2.0, 3.0, 0.0], ids, min_relevance=-1.0, floor_gate=-1.0,
                      normalization='minmax')
    kept = _fuse(embeddings, unit(1, 0, 0), [1.0, 2.0, 3.0, 0.0], ids, **keep)
    assert kept[0] == unfloored[0] and kept[1].scores == unfloored[1].scores  # BM25's best, c, is not set apart
    far = [unit(0.3, 1, 0), unit(0.2, 1, 0.1), unit(0.1, 0, 1), unit(0, 0, 1)]  # best cosine < 0.35: off-topic
    assert _fuse(far, unit(1, 0, 0), [1.0, 2.0, 3.0, 0.0], ids, **keep)[0] == ['a']
