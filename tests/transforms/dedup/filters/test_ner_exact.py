"""NER Exact's decision (`filters.ner_exact`) on hand-made entity sets."""

import pytest

from tests.helpers import decisions_by_id, ids, make
from transforms.dedup.filters.ner_exact import drop_ner_exact


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
    assert decisions_by_id(dropped) == {'b#0': ('ner_exact', 'a#0')}
    with pytest.raises(ValueError):
        drop_ner_exact([make('a', 0)])
