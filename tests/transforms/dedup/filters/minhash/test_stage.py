"""MinHash-LSH's Beam stage (band entries, candidate pairs, components, `DropNearDuplicates`) against the pure decision.

The unit under test here is the Beam wiring; MinHash signatures are computed
with the real datasketch.
"""

import pytest

from tests.helpers import PARAGRAPH, TYPO, expect, make, mixed_corpus, run_filter, with_minhash
from transforms.dedup.filters.minhash.decision import drop_minhash_groups
from transforms.dedup.filters.minhash.stage import DropNearDuplicates, band_entries, candidate_pairs, resolve_components
from transforms.features.minhash import MinHashConfig, estimated_jaccard


def test_lsh_buckets_and_components_match_the_pure_filter():
    chunks = mixed_corpus() + with_minhash([make('z', 0, PARAGRAPH), make('z', 1, TYPO), make('z', 2, '   ')])
    b, r = MinHashConfig(threshold=0.7).bands()
    buckets = {}
    for chunk in chunks:
        for key, member in band_entries(chunk, b, r):
            buckets.setdefault(key, []).append(member)
    assert not any(m.chunk_id == 'z#2' for ms in buckets.values() for m in ms)  # empty text
    assert all(m.minhash is None for ms in buckets.values() for m in ms)  # signatures stay out of buckets
    signature = {c.chunk_id: c.minhash for c in chunks}
    pairs = {p for item in buckets.items() for p in candidate_pairs(item)}
    edges = [p for p in pairs if estimated_jaccard(signature[p[0]], signature[p[2]]) >= 0.7]
    got = resolve_components(edges)
    _, dropped = drop_minhash_groups(chunks, 0.7)
    assert got == sorted((d.chunk.chunk_id, d.duplicate_of) for d in dropped)
    with pytest.raises(ValueError, match='no minhash'):
        list(band_entries(make('x', 0), b, r))


@pytest.mark.parametrize('threshold', [0.5, 0.8])
def test_drop_near_duplicates_matches_pure_filter(threshold):
    chunks = mixed_corpus() + with_minhash([make('z', 0, PARAGRAPH), make('z', 1, TYPO), make('z', 2, '')])
    b, r = MinHashConfig(threshold=threshold).bands()
    expected = expect(drop_minhash_groups(chunks, threshold))
    assert expected[1]  # there is something to find
    run_filter(chunks, DropNearDuplicates(threshold, b, r))(*expected)
