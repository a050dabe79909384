"""Filter specs (`--filter`): parsing, default thresholds and refusals."""

import pytest

from transforms.dedup.config import FilterSpec, parse_filters


def test_parse_filters_with_defaults():
    got = [tuple(f) for f in parse_filters('exact,minhash@0.7,similarity@0.8,random@0.4')]
    assert got == [('exact', None), ('minhash', 0.7), ('similarity', 0.8), ('random', 0.4)]
    got = [tuple(f) for f in parse_filters(' minhash , similarity_topics_ner , random , intra_doc , ner_half ')]
    assert got == [
        ('minhash', 0.8),
        ('similarity_topics_ner', 0.8),
        ('random', 0.5),
        ('intra_doc', 0.9),
        ('ner_half', None),
    ]
    assert [f.name for f in parse_filters('cascade')] == ['exact', 'minhash', 'intra_doc']
    assert parse_filters('none') == []
    name, threshold = FilterSpec('similarity_ner')
    assert (name, threshold) == ('similarity_ner', 0.8)


@pytest.mark.parametrize(
    'spec',
    ['', 'exact,,minhash', 'bogus', 'exact@0.5', 'ner_exact@0.5', 'minhash@x', 'minhash@1.5',
     'similarity@0', 'random@-0.1', 'minhash@nan', 'cascade@0.5', 'exact,cascade'],
)
def test_parse_filters_rejects(spec):
    with pytest.raises(ValueError):
        parse_filters(spec)


@pytest.mark.parametrize('spec', ['none,exact', 'exact,none', 'cascade,none'])
def test_none_stands_alone(spec):
    with pytest.raises(ValueError, match=r"^'none' stands alone \(it keeps every chunk\)"):
        parse_filters(spec)
