"""Filters applied in memory: every filter accounts for every chunk, in canonical order."""

import pytest

from tests.helpers import ids, make, mixed_corpus
from transforms.dedup.config import FilterSpec
from transforms.dedup.filters.exact import drop_exact
from transforms.dedup.filters.minhash.decision import drop_minhash_groups
from transforms.dedup.filters.ner_exact import drop_ner_exact
from transforms.dedup.filters.ner_half.decision import drop_ner_half
from transforms.dedup.filters.random_control import drop_random
from transforms.dedup.filters.similarity.decision import drop_similar
from transforms.dedup.in_memory import apply_filter


@pytest.mark.parametrize(
    'apply',
    [
        drop_exact,
        lambda cs: drop_minhash_groups(cs, 0.7),
        lambda cs: drop_random(cs, 0.4, 5),
        lambda cs: drop_similar(cs, 0.8),
        lambda cs: drop_similar(cs, 0.8, True, True),
        drop_ner_exact,
        drop_ner_half,
    ],
)
def test_every_filter_accounts_for_every_chunk(apply):
    chunks = mixed_corpus()
    kept, dropped = apply(chunks)
    assert len(kept) + len(dropped) == len(chunks)
    assert sorted(ids(kept) + [d.chunk.chunk_id for d in dropped]) == sorted(ids(chunks))
    kept_ids = set(ids(kept))
    assert all(d.duplicate_of is None or d.duplicate_of in kept_ids for d in dropped)


def test_apply_filter_runs_a_filter_over_the_corpus_in_canonical_order():
    a = make('a', 0, 'alpha beta gamma delta', [1.0, 0.0])
    a_copy = make('b', 0, 'Alpha  beta gamma delta', [1.0, 0.0])
    other = make('b', 1, 'something else entirely', [0.0, 1.0])
    kept, dropped = apply_filter([other, a_copy, a], FilterSpec('exact', None))
    assert [c.chunk_id for c in kept] == ['a#0', 'b#1']  # canonical order, whatever the input
    assert [(d.chunk.chunk_id, d.duplicate_of) for d in dropped] == [('b#0', 'a#0')]
    kept, dropped = apply_filter([a, a_copy, other], FilterSpec('similarity', 0.9))
    assert [d.chunk.chunk_id for d in dropped] == ['b#0']
    kept, dropped = apply_filter([a, a_copy, other], FilterSpec('intra_doc', 0.9))
    assert len(kept) + len(dropped) == 3
