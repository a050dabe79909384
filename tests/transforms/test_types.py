"""The record types: what a chunk says it carries."""

import numpy as np

from transforms.types import Chunk


def test_chunk_features_name_what_it_carries():
    chunk = Chunk('d#0', 'd', 0, 'text', 0, 4, 1, 'h')
    assert chunk.features() == []
    chunk = Chunk('d#0', 'd', 0, 'text', 0, 4, 1, 'h', embedding=np.zeros(2), topic=0, entities=())
    assert chunk.features() == ['embedding', 'entities', 'topics']
