"""The fusion benchmark's leave-one-set-out choice and its per-corpus split of a set."""

import pytest

from benchmarks.studies.fusion_sets import CANDIDATES, leave_one_out, objective, split_by_corpus
from transforms.evaluation.beir import IRDataset, Query
from transforms.query import retrieval
from transforms.types import Document


def scores(ndcg, coverage):
    return {'ndcg@10': ndcg, 'coverage@10': coverage}


def test_leave_one_out_tunes_on_the_other_sets_only():
    # 'x' is best on A and B, 'y' only on C: held out, C gets 'x' (what A and B choose), scored on C.
    table = {('A', 'x'): scores(0.8, 1.0), ('A', 'y'): scores(0.5, 0.5),
             ('B', 'x'): scores(0.9, 0.9), ('B', 'y'): scores(0.5, 0.5),
             ('C', 'x'): scores(0.4, 0.4), ('C', 'y'): scores(0.5, 0.5)}
    picks = leave_one_out(table, ['A', 'B', 'C'], ['x', 'y'])
    assert [(held, label) for held, label, _ in picks] == [('A', 'x'), ('B', 'x'), ('C', 'x')]
    assert picks[2][2] == objective(table['C', 'x']) == 0.4
    assert objective(table['A', 'x']) == 0.9


def test_leave_one_out_ties_go_to_the_earlier_label():
    table = {(f, c): scores(0.5, 0.5) for f in 'AB' for c in 'xy'}
    assert [label for _, label, _ in leave_one_out(table, ['A', 'B'], ['y', 'x'])] == ['y', 'y']


def test_split_by_corpus_keeps_each_query_with_its_corpus():
    docs = [Document(doc_id=d, text='t', path='p', position=i) for i, d in enumerate(['a:0', 'a:1', 'b:0'])]
    queries = [Query('q0', 'x', {'a:1': 1}), Query('q1', 'y', {'b:0': 1})]
    parts = split_by_corpus(IRDataset(docs, queries, []), 'set')
    assert list(parts) == ['set/a', 'set/b']
    assert [d.doc_id for d in parts['set/a'].documents] == ['a:0', 'a:1']
    assert [q.query_id for q in parts['set/b'].queries] == ['q1']


def test_every_candidate_is_a_valid_ranking_config():
    for label, settings in CANDIDATES.items():
        retrieval.RetrievalConfig(**settings)


def test_only_a_fusion_that_drops_no_candidate_of_an_on_topic_question_may_be_the_default():
    from benchmarks.studies.fusion_sets import keeps_every_candidate

    assert keeps_every_candidate({'alpha': 0.5})
    assert keeps_every_candidate({'min_relevance': 0.25, 'below_floor': 'last'})
    assert keeps_every_candidate({'min_relevance': 0.25, 'below_floor': 'last', 'floor_gate': 0.35})
    assert not keeps_every_candidate({'min_relevance': 0.25, 'below_floor': 'drop'})
    assert not keeps_every_candidate({'relative_floor': 0.3})


def test_eligible_rules_out_floor_tiers_a_cosine_outweighing_bm25_and_dedup_changes():
    from benchmarks.studies.fusion_sets import eligible

    assert eligible({'alpha': 0.4, 'normalization': 'minmax_floor', 'min_relevance': 0.25, 'below_floor': 'keep',
                     'floor_gate': 0.35})
    assert not eligible({'alpha': 0.5, 'min_relevance': 0.25, 'below_floor': 'last'})  # a floor tier
    assert not eligible({'alpha': 0.8, 'normalization': 'tmm'})  # a cosine gap alone outweighs BM25's best
    assert eligible({'fusion': 'rrf', 'weight_bm25': 2.0}) and not eligible({'fusion': 'rrf', 'weight_bm25': 0.5})
    assert not eligible({'alpha': 0.5, 'dedup_threshold': 1.0})


def test_margin_is_the_smaller_lead_over_the_better_single_signal():
    from benchmarks.studies.fusion_sets import margin

    assert margin(scores(0.70, 0.90), [scores(0.65, 0.92), scores(0.60, 0.80)]) == pytest.approx(-0.02)


def test_the_query_default_is_the_study_s_choice():
    from benchmarks.studies.fusion_sets import BASE

    chosen = retrieval.RetrievalConfig(**{**BASE, **CANDIDATES[
        'convex minmax from floor 0.25 a=0.4; best cosine < 0.35: floor on all']})
    assert chosen == retrieval.RetrievalConfig()
