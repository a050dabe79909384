"""The embedding step with the real all-MiniLM-L6-v2."""

import numpy as np
import pytest

from tests.helpers import ORBITS, PASTA
from transforms.features.embedding import EmbeddingConfig, SharedModel, _EmbedBatchFn, embed_texts, padded_length
from transforms.features.models import load_embedding_model
from transforms.types import Chunk

TEXTS = [PASTA, ORBITS, 'short', PASTA * 10, 'Satellites orbit the Earth.', 'Boil the spaghetti in salted water.']


def test_vectors_are_normalized_float32_and_match_encode(embedding_model):
    vectors = embed_texts(embedding_model, TEXTS, batch_size=4)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    reference = embedding_model.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(vectors, reference, atol=1e-5)


def test_vectors_are_bit_identical_whatever_the_batch(embedding_model):
    alone = np.stack([embed_texts(embedding_model, [t])[0] for t in TEXTS])
    for batch_size in (2, 3, 64):
        assert np.array_equal(embed_texts(embedding_model, TEXTS, batch_size), alone)
    shuffled = embed_texts(embedding_model, TEXTS[::-1] + ['another text entirely'], 4)[: len(TEXTS)][::-1]
    assert np.array_equal(shuffled, alone)


def test_semantics_are_real(embedding_model):
    pasta, orbits, _, _, satellites, spaghetti = embed_texts(embedding_model, TEXTS)
    assert pasta @ spaghetti > pasta @ satellites
    assert orbits @ satellites > orbits @ spaghetti


def test_empty_input(embedding_model):
    assert embed_texts(embedding_model, []).shape == (0, 384)


def test_padded_length_buckets():
    assert [padded_length(n, 256) for n in (1, 32, 33, 250, 600)] == [32, 32, 64, 256, 256]


def test_embed_dofn_sets_embeddings():
    fn = _EmbedBatchFn(SharedModel('all-MiniLM-L6-v2'), batch_size=8)
    fn.setup()
    chunks = [Chunk(f'd#{i}', 'd', i, t, 0, len(t), 1, 'h') for i, t in enumerate(TEXTS[:3])]
    out = list(fn.process(chunks))
    assert [c.chunk_id for c in out] == ['d#0', 'd#1', 'd#2']
    assert all(c.embedding.shape == (384,) for c in out)


def test_bad_settings_fail_clearly():
    with pytest.raises(ValueError, match='batch_size'):
        EmbeddingConfig(batch_size=0)
    with pytest.raises(ValueError, match='cannot load embedding model'):
        load_embedding_model('/nonexistent/model/dir')
