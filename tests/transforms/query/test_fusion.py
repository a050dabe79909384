"""Score fusion on hand-made scores: normalization, convex combination, tie-breaking prior, relative floor."""

import numpy as np
import pytest

from transforms.query import fusion


def test_minmax_maps_the_candidates_onto_0_1():
    assert fusion.normalize(np.array([0.2, 0.6, 0.4]), 'minmax', -1.0) == pytest.approx([0.0, 1.0, 0.5])


def test_tmm_measures_from_the_theoretical_minimum():
    # A cosine of -1 is 0, the best candidate 1, whatever the worst candidate is.
    assert fusion.normalize(np.array([0.2, 0.6, -0.2]), 'tmm', -1.0) == pytest.approx([0.75, 1.0, 0.5])
    assert fusion.normalize(np.array([0.0, 3.0, 1.5]), 'tmm', 0.0) == pytest.approx([0.0, 1.0, 0.5])


def test_a_signal_that_tells_nothing_apart_orders_nothing():
    # BM25 matched no candidate, or one value for all: zeros, so the other signal decides alone.
    assert list(fusion.normalize(np.zeros(3), 'minmax', 0.0)) == [0, 0, 0]
    assert list(fusion.normalize(np.zeros(3), 'tmm', 0.0)) == [0, 0, 0]
    assert list(fusion.normalize(np.full(2, 0.5), 'minmax', -1.0)) == [0, 0]
    assert len(fusion.normalize(np.zeros(0), 'minmax', 0.0)) == 0
    with pytest.raises(ValueError, match='unknown normalization'):
        fusion.normalize(np.zeros(1), 'zscore', 0.0)


def test_convex_fuse_weighs_the_normalized_signals_by_alpha():
    dense = np.array([0.8, 0.4, 0.0])
    bm25 = np.array([0.0, 10.0, 5.0])
    fused = fusion.convex_fuse(dense, bm25, alpha=0.25, method='minmax')
    assert fused == pytest.approx([0.25 * 1.0, 0.25 * 0.5 + 0.75 * 1.0, 0.75 * 0.5])
    assert fusion.convex_fuse(dense, bm25, 1.0, 'minmax') == pytest.approx([1.0, 0.5, 0.0])


def test_bm25_finds_what_dense_misses():
    # Candidate 1 is far from the question (the second hop of a multi-hop one) but BM25's best.
    dense = np.array([0.62, 0.05, 0.30, 0.28])
    bm25 = np.array([4.0, 9.0, 0.0, 0.5])
    fused = fusion.convex_fuse(dense, bm25, alpha=0.5, method='minmax')
    assert list(np.argsort(-fused)[:2]) == [0, 1]


def test_dense_finds_what_bm25_misses():
    # Candidate 2 shares no word with the question (BM25 0) yet is the closest in meaning.
    dense = np.array([0.30, 0.25, 0.71, 0.20])
    bm25 = np.array([3.0, 6.0, 0.0, 1.0])
    fused = fusion.convex_fuse(dense, bm25, alpha=0.5, method='minmax')
    assert set(np.argsort(-fused)[:2]) == {1, 2}


def test_prior_mixes_salience_and_scaled_recency_missing_values_neutral():
    values = fusion.prior([1.0, None, 0.5], [100.0, 300.0, None], weight_salience=1.0, weight_recency=1.0)
    assert values == pytest.approx([(1.0 + 0.0) / 2, (0.0 + 1.0) / 2, (0.5 + 0.0) / 2])
    assert list(fusion.prior([1.0], [None], 0.0, 0.0)) == [0.0]
    assert fusion.prior([None, None], [5.0, 5.0], 0.0, 1.0) == pytest.approx([1.0, 1.0])


def test_salience_does_not_reorder_unrelated_passages():
    # Passage 1 (a one-chunk document: salience 1.0) is clearly less relevant than passage 0:
    # the bounded tie-break cannot lift it over; it only decides between near-ties (2 and 3).
    scores = np.array([0.90, 0.60, 0.40, 0.399])
    values = np.array([0.0, 1.0, 0.0, 1.0])
    raised = fusion.tie_break(scores, values, epsilon=0.01)
    assert list(np.argsort(-raised)) == [0, 1, 3, 2]
    assert np.all(raised - scores <= 0.01 * 0.90 + 1e-12)
    assert list(fusion.tie_break(scores, values, epsilon=0.0)) == list(scores)
    # Candidates all tied at 0: the prior alone orders them.
    assert list(fusion.tie_break(np.zeros(2), np.array([0.2, 0.9]), 0.01)) == pytest.approx([0.002, 0.009])


def test_relative_floor_keeps_what_scores_near_the_best():
    assert list(fusion.relative_floor(np.array([1.0, 0.6, 0.4]), 0.5)) == [True, True, False]
    assert list(fusion.relative_floor(np.array([1.0, 0.0]), 0.0)) == [True, True]
    assert len(fusion.relative_floor(np.zeros(0), 0.5)) == 0


def test_minmax_floor_counts_cosines_below_the_floor_as_0_and_spreads_the_rest():
    cosines = np.array([0.1, 0.25, 0.45, 0.65])
    assert fusion.normalize(cosines, 'minmax_floor', -1.0, 0.25) == pytest.approx([0.0, 0.0, 0.5, 1.0])
    unfloored = fusion.normalize(cosines, 'minmax', -1.0)
    assert fusion.normalize(cosines, 'minmax_floor', -1.0, -1.0) == pytest.approx(unfloored)
    # Below the floor, what BM25 found still counts.
    fused = fusion.convex_fuse(cosines, np.array([3.0, 0.0, 0.0, 0.0]), 0.5, 'minmax_floor', dense_floor=0.25)
    assert fused == pytest.approx([0.5, 0.0, 0.25, 0.5])
