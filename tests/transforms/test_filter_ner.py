"""NER Exact and NER Half decisions (`filters.ner_exact`, `filters.ner_half`) on hand-made entity sets."""

import pytest

from tests.transforms.test_dedup import decisions, ids, make
from transforms.filters.ner_exact import drop_ner_exact
from transforms.filters.ner_half import drop_ner_half


def test_ner_exact_greedy_and_entity_free_chunks_kept():
    chunks = [
        make('a', 0, entities=('ORG:sega', 'GPE:japan')),
        make('a', 1, entities=()),
        make('b', 0, entities=('GPE:japan', 'PRODUCT:sega')),  # same names, other labels
        make('b', 1, entities=()),
        make('c', 0, entities=('ORG:sega',), salience=0.3),
    ]
    kept, dropped = drop_ner_exact(chunks)
    assert ids(kept) == ['a#0', 'a#1', 'b#1', 'c#0']
    assert decisions(dropped) == {'b#0': ('ner_exact', 'a#0')}
    with pytest.raises(ValueError):
        drop_ner_exact([make('a', 0)])


def test_ner_half_counts_only_kept_chunks():
    chunks = [
        make('d', 0, entities=('X:a', 'X:b', 'X:c', 'X:d')),
        make('d', 1, entities=('X:a', 'X:b', 'X:x', 'X:y')),  # 2/4 with d#0: dropped
        make('d', 2, entities=('X:a', 'X:x', 'X:y')),  # 1/3 with d#0; d#1 is not kept
        make('d', 3, entities=('X:x', 'X:y')),  # 2/2 with d#2
        make('d', 4, entities=('X:e', 'X:f', 'X:a')),  # 1/3 with d#0 and d#2
        make('d', 5, entities=()),
    ]
    kept, dropped = drop_ner_half(chunks)
    assert ids(kept) == ['d#0', 'd#2', 'd#4', 'd#5']
    assert decisions(dropped) == {'d#1': ('ner_half', 'd#0'), 'd#3': ('ner_half', 'd#2')}
    assert [d.score for d in dropped] == [0.5, 1.0]
