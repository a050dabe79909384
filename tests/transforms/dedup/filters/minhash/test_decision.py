"""MinHash-LSH's decision (`filters.minhash`) against ExactNorm, and its bounded bucket verification."""

import numpy as np
import pytest

from tests.helpers import BOILERPLATE, OTHER, PARAGRAPH, TYPO, decisions_by_id, ids, make, with_minhash
from transforms.dedup.filters.exact import drop_exact
from transforms.dedup.filters.minhash.decision import (
    BandMember,
    bucket_edges,
    candidate_pairs_from_buckets,
    connected_components,
    drop_minhash_groups,
    minhash_keepers,
)
from transforms.features.minhash import estimated_jaccard, lsh_bands


def test_typo_copy_caught_by_minhash_not_exact():
    chunks = with_minhash([make('a', 0, PARAGRAPH), make('b', 0, TYPO), make('c', 0, OTHER)])
    kept, dropped = drop_exact(chunks)
    assert len(kept) == 3 and not dropped
    kept, dropped = drop_minhash_groups(chunks, 0.8)
    assert ids(kept) == ['a#0', 'c#0']
    (d,) = dropped
    assert (d.reason, d.chunk.chunk_id, d.duplicate_of) == ('minhash', 'b#0', 'a#0')
    assert 0.8 <= d.score < 1.0


def test_boilerplate_across_documents():
    texts = [PARAGRAPH + ' ' + BOILERPLATE, OTHER + ' ' + BOILERPLATE]
    chunks = []
    for doc, text in zip(['d1', 'd2'], texts):
        chunks += [make(doc, 0, text), make(doc, 1, BOILERPLATE)]
    chunks.append(make('d3', 0, BOILERPLATE))
    chunks = with_minhash(chunks)
    kept, dropped = drop_exact(chunks)
    assert ids(kept) == ['d1#0', 'd1#1', 'd2#0']
    assert decisions_by_id(dropped) == {'d2#1': ('exact', 'd1#1'), 'd3#0': ('exact', 'd1#1')}
    kept, dropped = drop_minhash_groups(chunks, 0.8)
    assert ids(kept) == ['d1#0', 'd1#1', 'd2#0']
    assert all(d.score == 1.0 for d in dropped)


def test_minhash_groups_are_transitive_and_use_the_keep_rule():
    words = [f'w{i}' for i in range(100)]
    base = ' '.join(words)
    drift1 = ' '.join(words[:96] + ['x1', 'x2', 'x3', 'x4'])
    drift2 = ' '.join(['y1', 'y2', 'y3', 'y4'] + words[4:96] + ['x1', 'x2', 'x3', 'x4'])
    chunks = with_minhash(
        [make('a', 0, base), make('b', 0, drift1), make('c', 0, drift2, salience=0.7), make('e', 0, '')]
    )
    sigs = [c.minhash for c in chunks]
    # A chain: a~b and b~c reach 0.85, a~c does not.
    assert estimated_jaccard(sigs[0], sigs[1]) >= 0.85 and estimated_jaccard(sigs[1], sigs[2]) >= 0.85
    assert estimated_jaccard(sigs[0], sigs[2]) < 0.85
    kept, dropped = drop_minhash_groups(chunks, 0.85)
    # One component; the salient chunk keeps it; the empty chunk is never grouped.
    assert ids(kept) == ['c#0', 'e#0']
    assert decisions_by_id(dropped) == {'a#0': ('minhash', 'c#0'), 'b#0': ('minhash', 'c#0')}
    assert dropped[0].score == estimated_jaccard(sigs[0], sigs[2])  # below the threshold
    b, r = lsh_bands(0.85, 128)
    assert drop_minhash_groups(chunks, 0.85, b, r) == (kept, dropped)
    # Two empty chunks would estimate Jaccard 1.0; they are still not grouped.
    empties = with_minhash([make('e', 0, ''), make('f', 0, '')])
    assert len(drop_minhash_groups(empties, 0.8)[0]) == 2


def test_minhash_requires_signatures_and_bands_together():
    with pytest.raises(ValueError):
        drop_minhash_groups([make('a', 0, PARAGRAPH)], 0.8)
    chunks = with_minhash([make('a', 0, PARAGRAPH)])
    with pytest.raises(ValueError):
        drop_minhash_groups(chunks, 0.8, b=9)
    assert drop_minhash_groups([], 0.8) == ([], [])


def test_candidate_pairs_and_components():
    buckets = [['c', 'a'], ['a', 'c', 'a'], ['d'], ['b', 'e', 'd']]
    pairs = candidate_pairs_from_buckets(buckets)
    assert pairs == [('a', 'c'), ('b', 'd'), ('b', 'e'), ('d', 'e')]
    comps = connected_components(['f', 'a', 'b', 'c', 'd', 'e'], [('c', 'a'), ('e', 'b'), ('d', 'e')])
    assert comps == [['a', 'c'], ['b', 'd', 'e'], ['f']]
    assert connected_components([3, 2, 1], [(3, 1), (2, 1)]) == [[1, 2, 3]]
    assert connected_components([], [(5, 4)]) == [[4, 5]]


def test_bucket_verification_is_linear_in_the_bucket():
    sig = np.arange(128, dtype=np.uint64)
    members = [BandMember(f'c{i:04d}', (0.0, f'c{i:04d}', 0), sig) for i in range(500)]
    edges = bucket_edges(members, 0.8)
    # Each member after the first is linked to at most the 3 anchors and its predecessor.
    assert len(edges) == 1 + 2 + 3 + 496 * 4
    assert set(minhash_keepers(edges).values()) == {'c0000'}
