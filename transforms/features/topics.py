"""Topics for the `*_topics` filters: seeded KMeans over the chunk embeddings.

Holds the number of topics (`default_n_topics`), the bounded training sample
(`TOPIC_SAMPLE`, `sample_rank`), training and assignment (`train_topics`,
`assign_topics`) and the in-memory whole (`topics`); the build runs the same
steps with Beam (`features.AssignTopics`).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from transforms.features.embedding import unit_rows
from transforms.hashing import stable_hash


def default_n_topics(n: int) -> int:
    """Returns `round(sqrt(n / 2))` clipped to [1, 64]: ~20 topics for 800 chunks."""
    return int(min(64, max(1, round(math.sqrt(n / 2)))))


# KMeans for the `*_topics` filters is trained on at most this many chunks:
# 20k unit vectors of 384 float64 are ~60 MB, whatever the corpus size, and
# 20k points are far more than 64 centroids need. The sample is chosen by a
# stable hash of chunk_id, so it is the same on every runner and run.
TOPIC_SAMPLE = 20_000


def sample_rank(chunk_id: str) -> int:
    """The sampling rank of a chunk: models trained on a bounded sample take the smallest."""
    return stable_hash(chunk_id, person=b'sample')


def train_topics(sample: np.ndarray, n_total: int, n_topics: Optional[int] = None, seed: int = 0):
    """Trains the topic model on a sample of embeddings (canonical order).

    Seeded k-means (scikit-learn `KMeans`, k-means++ init, 4 fixed inits) on
    the unit vectors. KMeans rather than HDBSCAN (as in BERTopic) because it
    puts every chunk in a topic, whereas HDBSCAN's noise label would need its
    own rule in "same topic" comparisons; because the number of topics is
    fixed and reproducible from the seed; and because a model trained on a
    bounded sample assigns every other chunk on its own (`assign_topics`).

    Args:
      sample: `(m, dim)` vectors, at most `TOPIC_SAMPLE` of them.
      n_total: Chunks in the corpus, for `default_n_topics`.
      n_topics: Number of topics; defaults to `default_n_topics(n_total)`,
        and is capped at the sample size.
      seed: KMeans random state.

    Returns:
      The fitted model, or None when there is one topic (or no chunk).

    Raises:
      ValueError: If `n_topics` is not positive.
    """
    from sklearn.cluster import KMeans

    if n_topics is not None and n_topics <= 0:
        raise ValueError(f'n_topics must be > 0, got {n_topics}')
    k = min(len(sample), n_topics if n_topics is not None else default_n_topics(n_total))
    if k <= 1:
        return None
    return KMeans(n_clusters=k, n_init=4, random_state=seed).fit(unit_rows(sample))


def assign_topics(model, embeddings: np.ndarray) -> np.ndarray:
    """`(n,)` int64 topic ids: each unit embedding's nearest centroid (0 without a model)."""
    if model is None or not len(embeddings):
        return np.zeros(len(embeddings), dtype=np.int64)
    return model.predict(unit_rows(embeddings)).astype(np.int64)


def topics(
    embeddings: np.ndarray, n_topics: Optional[int] = None, seed: int = 0,
    chunk_ids: Optional[Sequence[str]] = None,
) -> np.ndarray:
    """Assigns each embedding a topic id, for the `*_topics` filters.

    The model is trained on the rows whose `sample_rank` is among the
    `TOPIC_SAMPLE` smallest (all rows for a smaller corpus), kept in the
    given order, then every row is assigned (`train_topics`, `assign_topics`):
    what the build's `AssignTopics` does with Beam.

    Args:
      embeddings: `(n, dim)` vectors, in canonical chunk order.
      n_topics: Number of topics; defaults to `default_n_topics(n)`.
      seed: KMeans random state.
      chunk_ids: The rows' chunk ids, needed to sample a corpus larger than
        `TOPIC_SAMPLE`.

    Returns:
      `(n,)` int64 topic ids in `[0, n_topics)`.

    Raises:
      ValueError: If `n_topics` is not positive, or a large corpus has no chunk_ids.
    """
    n = len(embeddings)
    rows = np.arange(n)
    if n > TOPIC_SAMPLE:
        if chunk_ids is None:
            raise ValueError(f'sampling {n} > {TOPIC_SAMPLE} embeddings needs their chunk_ids')
        ranks = sorted(rows, key=lambda i: sample_rank(chunk_ids[i]))
        rows = np.sort(np.array(ranks[:TOPIC_SAMPLE]))
    model = train_topics(np.asarray(embeddings)[rows], n, n_topics, seed)
    return assign_topics(model, np.asarray(embeddings))
