"""MinHash-LSH in the build: band keys -> buckets -> verified edges -> components, all keyed."""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import apache_beam as beam
import numpy as np

from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.filters.minhash.decision import BandMember, band_members, bucket_pairs, minhash_keepers
from transforms.dedup.greedy import by_end
from transforms.dedup.scope import chunk_scope
from transforms.dedup.stage_parts import JoinDecisions
from transforms.features.minhash import estimated_jaccard
from transforms.types import Chunk
from transforms.validate import check_threshold


def band_entries(chunk: Chunk, b: int, r: int, scope: Sequence[str] = ()):
    """`((scope key, band_key), BandMember without signature)` for each LSH band (`band_members`).

    The scope key in the bucket key means chunks of different scopes never
    share a bucket, so they are never candidates. The signature stays out of
    the buckets: a chunk is in b of them.
    """
    prefix = chunk_scope(chunk, scope)
    for key, member in band_members(chunk, b, r):
        yield (prefix, key), dataclasses.replace(member, minhash=None)


def candidate_pairs(bucket: tuple[tuple, Iterable[BandMember]]):
    """`(id_a, key_a, id_b, key_b)` for the candidate pairs of one bucket (`bucket_pairs`: O(n))."""
    _, members = bucket
    for a, b in bucket_pairs(members):
        yield a.chunk_id, a.keep_key, b.chunk_id, b.keep_key


def attach_first_signature(joined):
    """`(id_b, (pair, signature of a))` for the pairs whose first chunk is the key."""
    _, groups = joined
    signature = next(iter(groups['signature']))
    for pair in groups['pair']:
        yield pair[2], (pair, signature)


def verify_pairs(joined, threshold: float):
    """The pairs whose second chunk is the key and whose estimated Jaccard is >= threshold: the edges."""
    _, groups = joined
    signature = np.asarray(next(iter(groups['signature'])), np.uint64)
    for pair, first in groups['pair']:
        if estimated_jaccard(np.asarray(first, np.uint64), signature) >= threshold:
            yield pair


def resolve_components(edges: Iterable[tuple]) -> list[tuple[str, str]]:
    """`(dropped chunk_id, keeper chunk_id)` for every chunk a component drops, sorted."""
    return sorted(minhash_keepers(edges).items())


def signature_by_id(chunk: Chunk) -> tuple[str, np.ndarray]:
    return chunk.chunk_id, chunk.minhash


def keeper_first(decision: tuple[str, str]) -> tuple[str, str]:
    dropped_id, keeper_id = decision
    return keeper_id, dropped_id


def send_keeper_signature(joined):
    """`(dropped_id, (keeper_id, keeper signature))` for each chunk a keeper replaces."""
    keeper_id, groups = joined
    signatures = list(groups['signature'])
    for dropped_id in groups['dropped']:
        yield dropped_id, (keeper_id, signatures[0])


def jaccard_to_keeper(chunk: Chunk, keeper_signature) -> float:
    """The score of a chunk MinHash drops: its estimated Jaccard to its keeper."""
    return estimated_jaccard(np.asarray(chunk.minhash, np.uint64), np.asarray(keeper_signature, np.uint64))


class DropNearDuplicates(beam.PTransform):
    """MinHash-LSH. PCollection[Chunk] (with minhash) -> {'kept', 'dropped'}.

    Candidates come from a GroupByKey on `(scope, LSH band key)` (never all
    pairs), at most `filters.minhash.LSH_ANCHORS + 1` per bucket member
    (`filters.minhash.bucket_pairs`, as `bucket_edges` takes them in
    memory). The buckets hold ids and keep keys only; each candidate pair
    meets the two signatures by two keyed joins on chunk_id and is verified
    there. Only the verified edges, `(id, keep key, id, keep key)` tuples,
    are gathered on one worker: they stay small (distinct, at most
    `LSH_ANCHORS + 1` per bucket member, and only for chunks that have a
    near-duplicate). Components keep their first chunk
    (`filters.minhash.minhash_keepers`). The decisions reach the chunks by
    keyed joins (CoGroupByKey on chunk_id: first the keeper's signature, for
    the score, then the chunk), never a side input. Same functions as
    `filters.minhash.drop_minhash_groups`, so the same result.
    """

    def __init__(self, threshold: float, b: int, r: int, index: int = 0, scope: tuple[str, ...] = ()):
        super().__init__()
        check_threshold('minhash threshold', threshold)
        self._scope = scope
        self._threshold = threshold
        self._b = b
        self._r = r
        self._index = index

    def expand(self, chunks):
        signatures = chunks | 'SignatureById' >> beam.Map(signature_by_id)
        pairs = (
            chunks
            | 'EmitBandKeys' >> beam.FlatMap(band_entries, self._b, self._r, self._scope)
            | 'GroupByBand' >> beam.GroupByKey()
            | 'BucketPairs' >> beam.FlatMap(candidate_pairs)
            | 'DistinctPairs' >> beam.Distinct()
        )
        first_signed = (
            {'pair': pairs | 'ByFirst' >> beam.Map(by_end, 0), 'signature': signatures}
            | 'JoinFirst' >> beam.CoGroupByKey()
            | 'AttachFirst' >> beam.FlatMap(attach_first_signature)
        )
        decisions = (
            {'pair': first_signed, 'signature': signatures}
            | 'JoinSecond' >> beam.CoGroupByKey()
            | 'VerifyPairs' >> beam.FlatMap(verify_pairs, self._threshold)
            | 'GatherEdges' >> beam.combiners.ToList()  # small: verified edges, ids only
            | 'ResolveComponents' >> beam.FlatMap(resolve_components)
        )
        keeper_signatures = (
            {
                'signature': signatures,
                'dropped': decisions | 'KeyByKeeper' >> beam.Map(keeper_first),
            }
            | 'JoinKeepers' >> beam.CoGroupByKey()
            | 'SendKeeperSignature' >> beam.FlatMap(send_keeper_signature)
        )
        return chunks | 'ApplyDecisions' >> JoinDecisions(
            keeper_signatures, self._index, 'minhash', jaccard_to_keeper)


def stage(index: int, spec: FilterSpec, config: FilterConfig, definition) -> beam.PTransform:
    """The `index`-th filter of the run as a Beam stage (`stages.filter_transform` calls it)."""
    b, r = config.features.minhash_config(spec.threshold).bands()
    return DropNearDuplicates(spec.threshold, b, r, index, config.scope)
