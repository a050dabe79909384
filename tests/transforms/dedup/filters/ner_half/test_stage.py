"""NER Half's Beam stage (`DropHalfEntityOverlaps`) on hand-made chunks, against the pure decision.

The unit under test here is the Beam wiring, not the models: embeddings are
small hand-made vectors; entities are given.
"""

import pytest

from tests.helpers import expect, mixed_corpus, pure_global, run_filter
from transforms.dedup.config import FilterConfig
from transforms.dedup.filters.ner_half.stage import DropHalfEntityOverlaps


@pytest.mark.parametrize('max_posting', [2_000, 1])
def test_half_entity_overlaps_match_the_pure_filter(max_posting):
    # max_posting 1 caps every posting: the tiny corpus's edges are all to its first members anyway.
    chunks = mixed_corpus()
    kept, dropped = expect(pure_global('ner_half', chunks))
    assert dropped
    run_filter(chunks[::-1], DropHalfEntityOverlaps(FilterConfig(), 0, max_posting))(kept, dropped)
