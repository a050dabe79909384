"""Candidate pairs for the similarity filters without gathering chunks: clusters, blocks, verified edges.

The study's similarity rule is greedy in keep order: a chunk is dropped when a
chunk already kept is close enough. Comparing every pair needs the whole
corpus in one place; here candidates come from a seeded KMeans trained on a
bounded sample (SemDeDup-style), each chunk is sent to its `probes` nearest
clusters, and only pairs that share a cluster are compared, by exact cosine.
The verified edges are few (only chunks with a near-duplicate have any, and
each at most `MAX_EARLIER` per block) and are resolved by the greedy rule
(`dedup.greedy`).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional, Sequence

import numpy as np

from transforms.dedup.keep import SIM_EPS
from transforms.features.embedding import unit_rows

# Chunks a cluster should hold on average: k = n / CLUSTER_SIZE clusters.
CLUSTER_SIZE = 500

# The clustering is trained on at most this many chunks (by a stable hash of
# chunk_id): 20k x 384 float64 is ~60 MB whatever the corpus size.
CLUSTER_SAMPLE = 20_000

# A cluster larger than this (a hot group, e.g. many copies of one text) is
# split in keep order into blocks of this size; pairs across blocks are not
# compared and each split is counted.
MAX_GROUP = 5_000

# Each block of a split group starts with the group's first members (as
# MinHash verifies a bucket against its first members), so a near copy in
# any block meets the group's head: without them each block of a hot
# cluster would keep its own first copy.
GROUP_ANCHORS = 32

# A chunk keeps edges to at most this many earlier neighbours per block
# (the block's own greedy keepers first, then the earliest); more are
# counted (`capped_chunks`). The Chroma texts of recursive and fixed 400/200
# together (3,330 chunks) have at most 29 earlier neighbours per chunk at
# cosine 0.8, 15 at 0.9.
MAX_EARLIER = 32

# Candidate scores come from float32 products; the margin covers their error
# before each passing pair is re-scored in float64.
_MARGIN = 1e-3


@dataclasses.dataclass(frozen=True)
class SimMember:
    """What a cluster group holds of a chunk: its vector and what the extra conditions need."""

    chunk_id: str
    keep_key: tuple
    embedding: np.ndarray
    topic: Optional[int] = None
    entities: Optional[frozenset] = None


def n_clusters(n_total: int, cluster_size: int = CLUSTER_SIZE) -> int:
    """Clusters for `n_total` chunks: about `cluster_size` chunks each, at least 1."""
    return max(1, round(n_total / cluster_size))


def train_clusters(sample: np.ndarray, n_total: int, seed: int = 0, cluster_size: int = CLUSTER_SIZE):
    """Centroids `(k, dim)` of a seeded KMeans on the sample (canonical order); None for one cluster.

    One KMeans init (not the topics' 4): the clusters only propose candidates,
    and the probes cover a poor border.
    """
    from sklearn.cluster import KMeans

    k = min(len(sample), n_clusters(n_total, cluster_size))
    if k <= 1:
        return None
    model = KMeans(n_clusters=k, n_init=1, random_state=seed).fit(unit_rows(sample))
    return unit_rows(model.cluster_centers_)


def nearest_clusters(centroids: Optional[np.ndarray], embeddings: np.ndarray, probes: int) -> np.ndarray:
    """`(n, p)` ids of each embedding's `p` nearest centroids by cosine (ties by id)."""
    if centroids is None:
        return np.zeros((len(embeddings), 1), dtype=np.int64)
    sims = unit_rows(embeddings) @ centroids.T
    p = min(probes, centroids.shape[0])
    # A stable sort on -sim keeps the lower id first among equal similarities.
    return np.argsort(-sims, axis=1, kind='stable')[:, :p].astype(np.int64)


def split_group(
    members: Iterable[SimMember], max_group: int = MAX_GROUP, anchors: int = GROUP_ANCHORS
) -> list[list[SimMember]]:
    """A group in keep order (runner order never matters), in blocks of at most `max_group`.

    Every block after the first starts with the group's first `anchors`
    members (fewer if `max_group` is small), so each block stays in keep order
    and its members meet the group's head.
    """
    ordered = sorted({m.chunk_id: m for m in members}.values(), key=lambda m: (m.keep_key, m.chunk_id))
    if len(ordered) <= max_group:
        return [ordered] if ordered else []
    head = ordered[: min(anchors, max_group - 1)]
    step = max_group - len(head)
    return [ordered[:max_group]] + [head + ordered[i : i + step] for i in range(max_group, len(ordered), step)]


def local_keepers(close: np.ndarray) -> np.ndarray:
    """Which members the greedy pass would keep if the block were the whole corpus (bool per member).

    `close` is the block's `(n, n)` candidate matrix in keep order.
    """
    kept = np.zeros(len(close), dtype=bool)
    for b in range(len(close)):
        kept[b] = not np.any(close[b, :b] & kept[:b])
    return kept


def verify_block(
    block: Sequence[SimMember], threshold: float, same_topic: bool = False, shared_entity: bool = False,
    max_earlier: int = MAX_EARLIER,
) -> tuple[list[tuple[str, tuple, str, tuple, float]], int]:
    """The pairs of a block with cosine >= threshold (and the extra conditions), per chunk at most `max_earlier`.

    The extra conditions of `similarity_topics` / `similarity_ner` are checked
    on the verified edge, so an edge exists exactly when the study's rule
    would let one chunk drop the other. A chunk with more earlier neighbours
    than `max_earlier` keeps its edges to those the greedy pass most likely
    keeps: first the block's own greedy keepers, then the earliest, so a
    block of near copies yields O(block) edges, not O(block^2).

    Returns:
      `(edges, capped)`: edges `(later_id, later_key, earlier_id, earlier_key,
      cosine)`, and how many chunks had more candidates than `max_earlier`.
    """
    if len(block) < 2:
        return [], 0
    x64 = unit_rows(np.stack([m.embedding for m in block]))
    x32 = x64.astype(np.float32)
    close = x32 @ x32.T >= threshold - _MARGIN
    keepers = None
    edges, capped = [], 0
    for b in range(1, len(block)):
        late, found = block[b], 0
        earlier = np.flatnonzero(close[b, :b])
        if len(earlier) > max_earlier:
            if keepers is None:
                keepers = local_keepers(close)
            # A stable sort puts the local keepers first, each part in keep order.
            earlier = earlier[np.argsort(~keepers[earlier], kind='stable')]
        for a in earlier.tolist():
            if found == max_earlier:
                capped += 1
                break
            early = block[a]
            score = float(x64[a] @ x64[b])
            if score < threshold - SIM_EPS:
                continue
            if same_topic and early.topic != late.topic:
                continue
            if shared_entity and not (early.entities & late.entities):
                continue
            edges.append((late.chunk_id, late.keep_key, early.chunk_id, early.keep_key, score))
            found += 1
    return edges, capped
