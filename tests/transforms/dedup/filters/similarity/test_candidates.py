"""Candidate pairs without gathering: cluster candidates, verified edges, the greedy rule."""

import numpy as np
import pytest

from tests.helpers import make, near_copies
from transforms.dedup.filters.similarity import candidates
from transforms.dedup.filters.similarity.decision import drop_similar
from transforms.dedup.greedy import greedy_keep_first
from transforms.dedup.keep import keep_order_key


def members_of(chunks):
    return [candidates.SimMember(c.chunk_id, keep_order_key(c), c.embedding) for c in chunks]


@pytest.mark.parametrize('threshold', [0.8, 0.9])
def test_greedy_over_verified_edges_equals_the_global_greedy(threshold):
    chunks = near_copies()
    (block,) = candidates.split_group(members_of(chunks))
    edges, capped = candidates.verify_block(block, threshold)
    assert capped == 0
    got = greedy_keep_first(edges)
    _, dropped = drop_similar(chunks, threshold)
    assert got == {d.chunk.chunk_id: (d.duplicate_of, pytest.approx(d.score)) for d in dropped}
    assert dropped


def test_cluster_candidates_find_the_close_pairs():
    chunks = near_copies(n_groups=30)
    vectors = np.stack([c.embedding for c in chunks])
    centroids = candidates.train_clusters(vectors, len(chunks), cluster_size=10)
    assert centroids.shape[0] == 15
    nearest = candidates.nearest_clusters(centroids, vectors, probes=3)
    groups = {}
    for member, clusters in zip(members_of(chunks), nearest.tolist()):
        for cluster in clusters:
            groups.setdefault(cluster, []).append(member)
    edges = {e for g in groups.values() for block in candidates.split_group(g)
             for e in candidates.verify_block(block, 0.8)[0]}
    _, dropped = drop_similar(chunks, 0.8)
    got = greedy_keep_first(edges)
    assert got == {d.chunk.chunk_id: (d.duplicate_of, pytest.approx(d.score)) for d in dropped}


def test_near_copies_keep_edges_to_their_earliest_neighbours_only():
    # 40 copies of one vector: all pairs are close, each chunk keeps its 3 earliest.
    chunks = [make('d', i, f't{i}', embedding=np.ones(8, np.float32)) for i in range(40)]
    (block,) = candidates.split_group(members_of(chunks))
    edges, capped = candidates.verify_block(block, 0.9, max_earlier=3)
    assert len(edges) == 1 + 2 + 37 * 3 and capped == 36
    order = [m.chunk_id for m in block]
    assert all(order.index(early) < 3 for _, _, early, _, _ in edges)
    assert set(greedy_keep_first(edges)) == set(order[1:])


def test_a_capped_chunk_keeps_its_edge_to_the_blocks_keeper_first():
    # Unit vectors at these angles (degrees), cosine 0.9 is about 25.8 degrees:
    # c0 drops c1..c4; c5 is kept (its neighbours c1..c4 are dropped); c6's
    # earliest neighbours are c1, c2 (dropped), its keeper c5 comes later.
    angles = [0, 10, 11, 12, 13, 30, 33]
    chunks = [make('d', i, f't{i}', embedding=np.array([np.cos(np.radians(a)), np.sin(np.radians(a))], np.float32))
              for i, a in enumerate(angles)]
    (block,) = candidates.split_group(members_of(chunks))
    edges, capped = candidates.verify_block(block, 0.9, max_earlier=2)
    assert capped == 4  # c3, c4, c5 and c6 have more than 2 earlier neighbours
    _, dropped = drop_similar(chunks, 0.9)
    assert greedy_keep_first(edges) == {
        d.chunk.chunk_id: (d.duplicate_of, pytest.approx(d.score)) for d in dropped}
    assert {d.chunk.chunk_id for d in dropped} == {c.chunk_id for c in chunks[1:5]} | {chunks[6].chunk_id}


def test_hot_groups_are_split_in_keep_order():
    members = members_of(near_copies())
    blocks = candidates.split_group(members[::-1], max_group=7, anchors=0)
    assert [len(b) for b in blocks] == [7] * 8 + [4]
    flat = [m.chunk_id for b in blocks for m in b]
    assert flat == [m.chunk_id for m in sorted(members, key=lambda m: (m.keep_key, m.chunk_id))]


def test_blocks_of_a_hot_group_start_with_its_head():
    # 40 copies of one vector in blocks of 10: without anchors each block keeps its first copy.
    chunks = [make('d', i, f't{i}', embedding=np.ones(8, np.float32)) for i in range(40)]
    members = members_of(chunks)
    order = [m.chunk_id for m in candidates.split_group(members)[0]]
    for anchors, kept in ((0, 4), (3, 1)):
        blocks = candidates.split_group(members, max_group=10, anchors=anchors)
        assert all(len(b) <= 10 for b in blocks)
        assert all([m.chunk_id for m in b[:anchors]] == order[:anchors] for b in blocks)
        assert sorted({m.chunk_id for b in blocks for m in b}) == sorted(order)
        edges = {e for b in blocks for e in candidates.verify_block(b, 0.9)[0]}
        assert len(order) - len(greedy_keep_first(edges)) == kept


