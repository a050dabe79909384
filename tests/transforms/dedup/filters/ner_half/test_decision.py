"""NER Half's decision (`filters.ner_half`) on hand-made entity sets."""

from tests.helpers import decisions_by_id, ids, make
from transforms.dedup.filters.ner_half.decision import drop_ner_half


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
    assert decisions_by_id(dropped) == {'d#1': ('ner_half', 'd#0'), 'd#3': ('ner_half', 'd#2')}
    assert [d.score for d in dropped] == [0.5, 1.0]
