"""MinHash-LSH: lexical near-duplicates by estimated Jaccard (the study's `MinHash-LSH`).

Holds the filter's decision, in the three steps the build also runs with Beam
(`band_members`, `bucket_edges`, `minhash_keepers`; in memory:
`drop_minhash_groups`), and its registry entry.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Hashable, Iterable, Optional, Sequence, TypeVar

import numpy as np

from transforms.dedup.keep import keep_order_key, kept_and_dropped
from transforms.dedup.registry import PAIRS, FilterDef
from transforms.features.minhash import band_keys, estimated_jaccard, is_empty_signature, lsh_bands
from transforms.types import Chunk, Dropped
from transforms.validate import check_threshold

T = TypeVar('T', bound=Hashable)


def candidate_pairs_from_buckets(buckets: Iterable[Iterable[T]]) -> list[tuple[T, T]]:
    """Returns the distinct pairs of members sharing a bucket.

    A bucket is the members of one LSH band key (e.g. the values of a Beam
    `GroupByKey` on `band_keys`). Only members of a common bucket are paired,
    so the cost is the sum of squared bucket sizes, not the square of the
    corpus; exact copies should be dropped first (`exact.drop_exact`) because
    repeated boilerplate makes the largest buckets.

    Args:
      buckets: Groups of comparable, hashable member ids.

    Returns:
      Sorted unique `(a, b)` pairs with `a < b`.
    """
    pairs = set()
    for bucket in buckets:
        members = sorted(set(bucket))
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                pairs.add((members[x], members[y]))
    return sorted(pairs)


def connected_components(nodes: Iterable[T], edges: Iterable[tuple[T, T]]) -> list[list[T]]:
    """Groups nodes into the connected components of an undirected graph.

    Union-find with path halving; the root of a set is always its smallest
    member, so the result does not depend on edge order.

    Args:
      nodes: Comparable, hashable node ids (nodes only in `edges` are added).
      edges: Pairs of node ids.

    Returns:
      Every component as a sorted list, singletons included, sorted by their
      smallest member.
    """
    parent: dict[T, T] = {n: n for n in nodes}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            parent[rb] = ra
    groups: dict[T, list[T]] = collections.defaultdict(list)
    for n in list(parent):
        groups[find(n)].append(n)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


# Each LSH bucket member is verified against this many first members of its
# bucket in keep order (and its predecessor): O(n) per bucket, as datatrove links
# consecutive signatures, instead of all pairs (quadratic in a hot bucket).
LSH_ANCHORS = 3


@dataclasses.dataclass(frozen=True)
class BandMember:
    """What an LSH bucket holds of a chunk: its id and keep key, and its signature to verify in memory.

    The build's buckets leave the signature out (None): a chunk is in b
    buckets, and its signature reaches only the candidate pairs it is in.
    """

    chunk_id: str
    keep_key: tuple
    minhash: Optional[np.ndarray] = None


def band_members(chunk: Chunk, b: int, r: int) -> list[tuple[bytes, BandMember]]:
    """`(band_key, BandMember)` for each LSH band of a chunk's signature.

    Chunks with an empty shingle set are never grouped (two empty signatures
    would estimate Jaccard 1.0).

    Raises:
      ValueError: If the chunk has no signature.
    """
    if chunk.minhash is None:
        raise ValueError(f'chunk {chunk.chunk_id} has no minhash signature')
    sig = np.asarray(chunk.minhash, np.uint64)
    if is_empty_signature(sig):
        return []
    member = BandMember(chunk.chunk_id, keep_order_key(chunk), sig)
    return [(key, member) for key in band_keys(sig, b, r)]


def bucket_pairs(members: Iterable[BandMember], anchors: int = LSH_ANCHORS) -> list[tuple[BandMember, BandMember]]:
    """The candidate pairs of one LSH bucket, O(n) of them: `(a, b)`, `a` before `b` in keep order.

    Members are sorted in keep order (then chunk_id, so runner order never
    matters); each is paired with the bucket's first `anchors` members and
    with its predecessor. All pairs would cost n^2/2 in a hot bucket (one
    boilerplate paragraph with small changes); linking to the first members
    and the predecessor connects the bucket's members that are near the
    bucket's head or near each other in keep order, which is what the
    components need. A pair of members that pass only with each other and
    are neither anchors nor neighbours is missed (it may still meet in
    another band's bucket).
    """
    ordered = sorted({m.chunk_id: m for m in members}.values(), key=lambda m: (m.keep_key, m.chunk_id))
    return [(ordered[x], ordered[y])
            for y in range(1, len(ordered))
            for x in sorted(set(range(min(anchors, y))) | {y - 1})]


def bucket_edges(
    members: Iterable[BandMember], threshold: float, anchors: int = LSH_ANCHORS
) -> list[tuple[str, tuple, str, tuple]]:
    """The verified edges of one LSH bucket: its `bucket_pairs` whose estimated Jaccard is >= threshold.

    Returns:
      `(id_a, keep_key_a, id_b, keep_key_b)` edges, `a` before `b` in keep order.
    """
    return [(a.chunk_id, a.keep_key, b.chunk_id, b.keep_key)
            for a, b in bucket_pairs(members, anchors)
            if estimated_jaccard(a.minhash, b.minhash) >= threshold]


def minhash_keepers(edges: Iterable[tuple[str, tuple, str, tuple]]) -> dict[str, str]:
    """Groups verified edges into connected components; each keeps its first chunk.

    Returns:
      `{dropped chunk_id: keeper chunk_id}`.
    """
    keys: dict[str, tuple] = {}
    pairs = set()
    for a, key_a, b, key_b in edges:
        keys[a], keys[b] = key_a, key_b
        pairs.add((a, b))
    decisions = {}
    for component in connected_components(sorted(keys), sorted(pairs)):
        keeper = min(component, key=lambda i: (keys[i], i))
        decisions.update({i: keeper for i in component if i != keeper})
    return decisions


def drop_minhash_groups(
    chunks: Sequence[Chunk],
    threshold: float = 0.8,
    b: Optional[int] = None,
    r: Optional[int] = None,
) -> tuple[list[Chunk], list[Dropped]]:
    """MinHash-LSH: keeps one chunk per group of lexical near-duplicates.

    Chunks sharing an LSH band key are candidates, verified in O(n) per
    bucket (`bucket_edges`); each connected component of the verified edges
    keeps its first chunk by `keep_order_key` (`minhash_keepers`). The build
    runs the same three functions with Beam (`minhash.stage.DropNearDuplicates`).
    Components are transitive, so a dropped chunk may be linked to the kept
    one only through others; its score is its own estimated Jaccard to the
    kept one, which can then be below `threshold`. Chunks with an empty
    shingle set (empty text) are never grouped.

    Args:
      chunks: Chunks with `minhash` set, all with one signature length and seed.
      threshold: Estimated Jaccard threshold in (0, 1].
      b: LSH bands; with `r`, defaults to `lsh_bands(threshold, num_perm)`.
      r: Rows per band.

    Returns:
      `(kept, dropped)`; reason `minhash`.

    Raises:
      ValueError: If a chunk has no signature, or the parameters are out of range.
    """
    check_threshold('minhash threshold', threshold)
    if not chunks:
        return [], []
    missing = [c.chunk_id for c in chunks if c.minhash is None]
    if missing:
        raise ValueError(f'chunks without a minhash signature: {missing[:5]}')
    if (b is None) != (r is None):
        raise ValueError('give both b and r, or neither')
    if b is None:
        b, r = lsh_bands(threshold, len(chunks[0].minhash))
    buckets: dict[bytes, list[BandMember]] = collections.defaultdict(list)
    for chunk in chunks:
        for key, member in band_members(chunk, b, r):
            buckets[key].append(member)
    edges = [e for members in buckets.values() if len(members) > 1 for e in bucket_edges(members, threshold)]
    keepers = minhash_keepers(edges)
    by_id = {c.chunk_id: i for i, c in enumerate(chunks)}
    dropped = {}
    for chunk_id, keeper_id in keepers.items():
        i, k = by_id[chunk_id], by_id[keeper_id]
        score = estimated_jaccard(np.asarray(chunks[i].minhash, np.uint64), np.asarray(chunks[k].minhash, np.uint64))
        dropped[i] = Dropped(chunks[i], 'minhash', keeper_id, score)
    return kept_and_dropped(chunks, dropped)


def decide(chunks, threshold, config):
    b, r = config.features.minhash_config(threshold).bands()
    return drop_minhash_groups(chunks, threshold, b, r)


FILTER = FilterDef(
    name='minhash', label='MinHash-LSH', position=1,
    removes='near-duplicates by MinHash-LSH: candidates from shared LSH band keys (a GroupByKey, '
            'never all pairs), each bucket member checked by estimated Jaccard against the '
            "bucket's first members and its predecessor in keep order (O(n) per bucket), "
            'grouped by connected components',
    default=0.8, needs=frozenset({'minhash'}), strategy=PAIRS, decide=decide,
    near_copy_reasons=frozenset({'minhash'}))
