"""Topics for the `*_topics` filters (`transforms.topics`): deterministic clusters, a bounded training sample."""

import numpy as np
import pytest

from tests.helpers import near_copies, unit
from transforms.features.topics import default_n_topics, topics


def test_topics_separate_clusters_deterministically():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        unit(1, 0, 0) + rng.normal(scale=0.05, size=(20, 3)),
        unit(0, 1, 0) + rng.normal(scale=0.05, size=(20, 3)),
    ])
    t = topics(x, 2, seed=0)
    assert t.dtype == np.int64 and len(set(t[:20])) == 1 and len(set(t[20:])) == 1 and t[0] != t[20]
    assert topics(x, 2, seed=0).tolist() == t.tolist()
    assert topics(x[:1]).tolist() == [0]
    assert topics(np.zeros((0, 3))).shape == (0,)
    assert [default_n_topics(n) for n in (1, 8, 800, 10**6)] == [1, 2, 20, 64]
    assert len(topics(x)) == 40
    with pytest.raises(ValueError):
        topics(x, 0)


def test_topics_train_on_a_bounded_sample(monkeypatch):
    chunks = near_copies()
    vectors = np.stack([c.embedding for c in chunks])
    ids = [c.chunk_id for c in chunks]
    full = topics(vectors, 4, 0, ids)
    monkeypatch.setattr('transforms.features.topics.TOPIC_SAMPLE', 30)
    sampled = topics(vectors, 4, 0, ids)
    assert sampled.shape == full.shape and set(sampled.tolist()) <= set(range(4))
    with pytest.raises(ValueError, match='chunk_ids'):
        topics(vectors, 4, 0)
