"""Token and character metrics and the greedy oracle, on hand-computed cases."""

import numpy as np
import pytest

from transforms.evaluation import metrics
from transforms.evaluation.metrics import Scores


def approx(scores: Scores, precision, recall, iou):
    return scores == Scores(pytest.approx(precision), pytest.approx(recall), pytest.approx(iou))


def test_raw_tokens_lowercases_and_counts_duplicates_once():
    assert metrics.raw_tokens('The cat, the CAT and the dog!') == {'the', 'cat', 'and', 'dog'}
    assert metrics.raw_tokens('  ...  ') == frozenset()


def test_token_scores_hand_computed():
    # |Te & Tr| = 2 (c, d); |Tr| = 3; |Te| = 4; |Te | Tr| = 5.
    assert approx(metrics.token_scores({'a', 'b', 'c', 'd'}, {'c', 'd', 'e'}), 2 / 3, 2 / 4, 2 / 5)


def test_token_scores_duplicate_tokens_count_once():
    expected = metrics.raw_tokens('cat cat cat dog')
    retrieved = metrics.raw_tokens('cat cat bird bird bird')
    # {cat, dog} vs {cat, bird}: one hit out of two on each side, union of three.
    assert approx(metrics.token_scores(expected, retrieved), 1 / 2, 1 / 2, 1 / 3)


def test_foreign_tokens_count_as_retrieved_but_never_as_hits():
    # b is only in a chunk of another document: not a hit, but it is retrieved text.
    scores = metrics.token_scores({'a', 'b'}, {'a'}, foreign={'b', 'z'})
    assert approx(scores, 1 / 3, 1 / 2, 1 / 3)


def test_empty_retrieval_and_empty_reference_score_zero():
    assert metrics.token_scores({'a'}, frozenset()) == Scores(0.0, 0.0, 0.0)
    assert metrics.token_scores(frozenset(), {'a'}) == Scores(0.0, 0.0, 0.0)
    assert metrics.token_scores(frozenset(), frozenset()) == Scores(0.0, 0.0, 0.0)


def test_perfect_retrieval():
    assert metrics.token_scores({'a', 'b'}, {'a', 'b'}) == Scores(1.0, 1.0, 1.0)


def test_union_and_overlap_of_spans():
    assert metrics.union_spans([(12, 30), (0, 15), (40, 40), (30, 35)]) == [(0, 35)]
    assert metrics.spans_length([(0, 10), (5, 12), (20, 25)]) == 17
    assert metrics.overlap_length([(0, 10), (20, 30)], [(5, 25)]) == 10
    assert metrics.overlap_length([], [(0, 5)]) == 0


def test_char_scores_union_retrieved_ranges():
    # Retrieved (0, 15) and (12, 30) cover 30 chars; the reference's 10 chars are all inside.
    assert approx(metrics.char_scores([(10, 20)], [(0, 15), (12, 30)]), 10 / 30, 1.0, 10 / 30)


def test_char_scores_partial_overlap_and_foreign_chunks():
    # Overlap 5 of a 10-char reference; 10 own + 20 foreign chars retrieved; union 10 + 20 + 10 - 5.
    assert approx(metrics.char_scores([(10, 20)], [(15, 25)], foreign_chars=20), 5 / 30, 5 / 10, 5 / 35)


def test_char_scores_empty_retrieval():
    assert metrics.char_scores([(0, 10)], []) == Scores(0.0, 0.0, 0.0)


def test_greedy_oracle_picks_the_largest_gain_first():
    expected = {'a', 'b', 'c', 'd', 'e'}
    candidates = [{'a', 'b'}, {'a', 'b', 'c'}, {'d'}, {'d', 'e'}, {'x', 'y', 'z'}]
    assert metrics.greedy_oracle(expected, candidates, 2) == ([1, 3], 1.0)
    assert metrics.greedy_oracle(expected, candidates, 1) == ([1], pytest.approx(0.6))


def test_greedy_oracle_stops_when_nothing_is_gained_and_breaks_ties_by_index():
    expected = {'a', 'b'}
    assert metrics.greedy_oracle(expected, [{'a'}, {'b'}, {'a'}], 5) == ([0, 1], 1.0)
    assert metrics.greedy_oracle(expected, [{'x'}], 5) == ([], 0.0)
    assert metrics.greedy_oracle(expected, [], 5) == ([], 0.0)
    assert metrics.greedy_oracle(set(), [{'a'}], 5) == ([], 0.0)


def test_greedy_cover_validates():
    with pytest.raises(ValueError, match='k must be >= 0'):
        metrics.greedy_cover(np.zeros((1, 1), bool), -1)
    with pytest.raises(ValueError, match='2-D'):
        metrics.greedy_cover(np.zeros(3, bool), 1)
    assert metrics.greedy_cover(np.ones((2, 3), bool), 0) == ([], 0)


def test_reduction():
    assert metrics.reduction(10, 6) == pytest.approx(40.0)
    assert metrics.reduction(0, 0) == 0.0
    with pytest.raises(ValueError):
        metrics.reduction(3, 4)


def test_the_token_matrix_oracle_is_greedy_oracle():
    """The evaluation's sliced incidence gives the study's oracle, filtered chunks excluded."""
    sets = [frozenset('ab'), frozenset('bcd'), frozenset('x'), frozenset('ad'), frozenset('cz')]
    docs = ['d', 'd', 'e', 'd', 'd']
    matrix = metrics.TokenMatrix(sets, docs)
    expected = frozenset('abcdq')  # q is in no chunk
    incidence = matrix.incidence('d', expected)
    for kept in ([True] * 5, [True, False, True, True, True], [False, False, True, False, True]):
        kept = np.array(kept)
        candidates = [s for s, d, k in zip(sets, docs, kept) if d == 'd' and k]
        for k in (1, 2, 5):
            assert matrix.oracle('d', expected, incidence, kept, k) == pytest.approx(
                metrics.greedy_oracle(expected, candidates, k)[1])
    assert matrix.oracle('none', expected, matrix.incidence('none', expected), np.ones(5, bool), 3) == 0.0


def test_retrieved_char_scores_count_foreign_chunks_as_retrieved_text():
    scores = metrics.retrieved_char_scores([(0, 10)], 'd', [('d', 0, 5), ('d', 3, 10), ('e', 0, 10), ('e', 5, 10)])
    assert scores.recall == 1.0
    assert scores.precision == pytest.approx(10 / 20)

