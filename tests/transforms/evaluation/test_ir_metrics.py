"""IR metrics on hand-computed rankings (trec_eval's definitions, as BEIR and MTEB report them)."""

import math

import pytest

from transforms.evaluation import ir_metrics


def test_ndcg_uses_linear_gains_and_a_log2_discount():
    relevant = {'a': 2, 'b': 1}
    ideal = 2 + 1 / math.log2(3)
    assert ir_metrics.ndcg_at(['a', 'b', 'x'], relevant, 10) == pytest.approx(1.0)
    assert ir_metrics.ndcg_at(['x', 'b', 'a'], relevant, 10) == pytest.approx(
        (1 / math.log2(3) + 2 / math.log2(4)) / ideal)
    assert ir_metrics.ndcg_at(['x', 'a'], relevant, 1) == 0.0  # the cut-off leaves `a` out
    assert ir_metrics.ndcg_at(['a'], {}, 10) == 0.0


def test_recall_and_mrr():
    relevant = {'a': 1, 'b': 1, 'c': 1, 'd': 1}
    assert ir_metrics.recall_at(['x', 'a', 'b'], relevant, 2) == 0.25
    assert ir_metrics.recall_at(['a', 'b', 'c', 'd'], relevant, 100) == 1.0
    assert ir_metrics.mrr_at(['x', 'y', 'c'], relevant, 10) == pytest.approx(1 / 3)
    assert ir_metrics.mrr_at(['x', 'y', 'c'], relevant, 2) == 0.0


def test_group_coverage_and_all_groups_found():
    groups = (frozenset({'a1', 'a2'}), frozenset({'b'}), frozenset({'c'}))
    assert ir_metrics.group_coverage_at(['a2', 'x', 'b'], groups, 10) == pytest.approx(2 / 3)
    assert ir_metrics.all_groups_at(['a2', 'x', 'b'], groups, 10) == 0.0
    assert ir_metrics.all_groups_at(['a1', 'a2', 'b', 'c'], groups, 4) == 1.0
    assert ir_metrics.all_groups_at(['a1', 'a2', 'b', 'c'], groups, 3) == 0.0
    assert ir_metrics.group_coverage_at(['a'], (), 10) == 0.0


def test_documents_of_keeps_each_passage_at_its_best_chunk_without_the_query_itself():
    assert ir_metrics.documents_of(['p', 'q1', 'p', 'r', 'q1', 's'], exclude='q1') == ['p', 'r', 's']
