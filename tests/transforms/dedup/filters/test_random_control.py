"""The random control's decision (`filters.random_control.drop_random`)."""

import pytest

from tests.helpers import ids, make
from transforms.dedup.filters.random_control import drop_random, random_unit


def test_random_ratio_and_determinism():
    chunks = [make(f'd{i // 10}', i % 10) for i in range(4000)]
    kept, dropped = drop_random(chunks, 0.3, seed=1)
    assert len(kept) + len(dropped) == len(chunks)
    assert abs(len(dropped) / len(chunks) - 0.3) < 0.03
    assert drop_random(chunks, 0.3, seed=1) == (kept, dropped)
    assert ids(drop_random(chunks, 0.3, seed=2)[0]) != ids(kept)
    # Per-chunk decisions: a subset of the corpus gets the same decisions.
    sub_kept, _ = drop_random(chunks[:100], 0.3, seed=1)
    assert ids(sub_kept) == [c for c in ids(kept) if c in set(ids(chunks[:100]))]
    assert drop_random(chunks, 0.0)[1] == [] and drop_random(chunks, 1.0)[0] == []
    assert all(d.reason == 'random' and d.duplicate_of is None for d in dropped)
    assert 0.0 <= random_unit('x#0', 1) < 1.0 and random_unit('x#0', 1) != random_unit('x#0', 2)
    with pytest.raises(ValueError):
        drop_random(chunks, 1.5)
