"""The filter registry: every filter declared once, what each needs, and what is generated from it."""


import pytest

from pipelines.build_index import options as build_options
from transforms.dedup import registry
from transforms.dedup.config import FilterSpec
from transforms.evaluation import grid as eval_grid


def test_registry_holds_the_study_filters_in_table_order():
    assert registry.names() == [
        'exact', 'minhash', 'random', 'similarity', 'similarity_topics', 'similarity_ner',
        'similarity_topics_ner', 'ner_exact', 'ner_half', 'intra_doc', 'covered']
    assert registry.get('ner_exact').label == 'NER Exact'
    assert registry.needing('topics') == {'similarity_topics', 'similarity_topics_ner'}


def test_everything_else_is_driven_by_the_registry():
    assert build_options.FILTER_NAMES == sorted(registry.names()) + ['cascade', 'none']
    assert {n: eval_grid.METHOD_NAMES[n] for n in registry.names()} == {
        n: f.label for n, f in registry.definitions().items()}
    assert FilterSpec('minhash').threshold == registry.get('minhash').default
    with pytest.raises(ValueError, match='unknown filter'):
        FilterSpec('nope')


def test_filter_table_lists_every_filter_and_the_extra_names():
    table = registry.filter_table()
    for name in registry.names() + ['cascade', 'none']:
        assert f'| `{name}` |' in table


def test_definitions_are_checked():
    exact = registry.get('exact')
    with pytest.raises(ValueError, match='strategy'):
        registry.FilterDef('x', 'X', '', None, frozenset(), 'somewhere', exact.decide)
    with pytest.raises(ValueError, match='group_key'):
        registry.FilterDef('x', 'X', '', None, frozenset(), registry.GROUPED, exact.decide)
    with pytest.raises(ValueError, match='features'):
        registry.FilterDef('x', 'X', '', None, frozenset({'colour'}), registry.PER_CHUNK, exact.decide)


def test_the_registry_declares_what_each_filter_needs():
    assert registry.get('similarity_topics').needs == {'embedding', 'topics'}
    assert registry.get('intra_doc').needs == {'embedding'} and registry.get('minhash').needs == {'minhash'}
    assert registry.get('exact').needs == frozenset() and registry.get('ner_half').needs == {'entities'}
    with pytest.raises(ValueError, match='topics cluster the embeddings'):
        registry.FilterDef('x', 'X', 'x', None, frozenset({'topics'}), registry.PER_CHUNK, decide=None)


def test_reasons():
    # Exact copies are compared too: the chunk they copy may be dropped later as a near-copy.
    assert registry.delta_reasons(False) == {'exact', 'minhash', 'intra_doc_near'}
    assert 'similarity' in registry.delta_reasons(True) and 'ner_half' not in registry.delta_reasons(True)
