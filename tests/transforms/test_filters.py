"""The filter registry: every filter declared once, and what is generated from it."""

import os

import pytest

from pipelines import build_options, eval_grid
from transforms import dedup, filters

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_registry_holds_the_study_filters_in_table_order():
    assert filters.names() == [
        'exact', 'minhash', 'random', 'similarity', 'similarity_topics', 'similarity_ner',
        'similarity_topics_ner', 'ner_exact', 'ner_half', 'intra_doc']
    assert filters.get('ner_exact').label == 'NER Exact'
    assert filters.needing('topics') == {'similarity_topics', 'similarity_topics_ner'}


def test_everything_else_is_driven_by_the_registry():
    assert build_options.FILTER_NAMES == sorted(filters.names()) + ['cascade', 'none']
    assert {n: eval_grid.METHOD_NAMES[n] for n in filters.names()} == {
        n: f.label for n, f in filters.registry().items()}
    assert dedup.FilterSpec('minhash').threshold == filters.get('minhash').default
    with pytest.raises(ValueError, match='unknown filter'):
        dedup.FilterSpec('nope')


def test_readme_table_is_the_generated_one():
    text = open(os.path.join(REPO, 'README.md'), encoding='utf-8').read()
    table = text.split(filters.README_BEGIN + '\n', 1)[1].split(filters.README_END, 1)[0]
    assert table == filters.readme_table(), 'regenerate the README table with filters.readme_table()'


def test_definitions_are_checked():
    exact = filters.get('exact')
    with pytest.raises(ValueError, match='strategy'):
        filters.FilterDef('x', 'X', '', None, frozenset(), 'somewhere', exact.decide)
    with pytest.raises(ValueError, match='group_key'):
        filters.FilterDef('x', 'X', '', None, frozenset(), filters.GROUPED, exact.decide)
    with pytest.raises(ValueError, match='features'):
        filters.FilterDef('x', 'X', '', None, frozenset({'colour'}), filters.PER_CHUNK, exact.decide)
