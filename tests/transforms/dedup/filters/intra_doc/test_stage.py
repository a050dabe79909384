"""Intra-doc's Beam stage (`intra_doc_group`, `DropIntraDocRedundancy`) on hand-made chunks, against the pure decision.

The unit under test here is the Beam wiring, not the embedding model:
embeddings are small hand-made vectors.
"""

import numpy as np
import pytest

from tests.helpers import expect, make, mixed_corpus, run_filter, unit
from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.filters.intra_doc.decision import intra_doc, salience
from transforms.dedup.filters.intra_doc.stage import DropIntraDocRedundancy, intra_doc_group


def test_intra_doc_group_reports_salience_lifts():
    # Two near-copies far from the document's other chunks: low base salience, boosted.
    vectors = [unit(1, 0, 0), unit(1, 0.05, 0), unit(0, 1, 0.1), unit(0, 1, -0.1), unit(0, 0.9, 0.5), unit(0, 0.9, -0.5)]
    chunks = [make('doc', i, f'text {i}', embedding=v) for i, v in enumerate(vectors)]
    config = FilterConfig(intra_doc_boost=0.5, intra_doc_boost_mode='linear', warn_salience=0.6)
    kept, dropped, lifted = intra_doc_group(chunks[::-1], FilterSpec('intra_doc'), config)
    assert [c.chunk_id for c in kept] == [c.chunk_id for c in intra_doc(chunks, 0.9, boost=0.5, mode='linear')[0]]
    base = salience(np.stack(vectors))
    # doc#1 is the more central of the pair, so it is kept and boosted (capped at 1.0).
    assert base[1] > base[0] and base[1] <= 0.6
    assert lifted == [('doc#1', pytest.approx(base[1]), 1.0)]


def test_drop_intra_doc_redundancy_per_document():
    chunks = mixed_corpus()
    spec = FilterSpec('intra_doc', 0.9)
    kept, dropped = [], []
    for doc in sorted({c.doc_id for c in chunks}):
        k, d = intra_doc([c for c in chunks if c.doc_id == doc], 0.9)
        kept += k
        dropped += d
    assert dropped
    run_filter(chunks, DropIntraDocRedundancy(spec, FilterConfig()))(*expect((kept, dropped)))
