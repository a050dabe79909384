"""Filters by candidate pairs: keys -> GroupByKey -> verified edges -> decisions joined by chunk_id.

MinHash-LSH (band keys, components) and the similarity family (cluster keys,
the study's greedy rule). Only verified edges are gathered; decisions reach
the chunks through a CoGroupByKey on chunk_id, never a side input.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterable, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from transforms import candidates, dedup
from transforms.entities import entity_names
from transforms.features import TrainOnSample
from transforms.filter_chunks import DROPPED, KEPT, _Counters, counter_namespace
from transforms.filters.minhash import BandMember, band_members, bucket_pairs, minhash_keepers
from transforms.greedy_rounds import ResolveGreedy, by_end
from transforms.minhash import estimated_jaccard
from transforms.scope import chunk_scope
from transforms.types import Chunk, Dropped

# Counters in each filter's namespace.
SPLIT_GROUPS = 'split_groups'  # hot groups split into blocks (pairs across blocks not compared)
EDGES = 'verified_edges'
CAPPED = 'capped_chunks'  # chunks whose earlier neighbours in a block were cut at candidates.MAX_EARLIER


class SplitByDecisionFn(beam.DoFn):
    """Joins a chunk with its decision (if any): kept, or dropped in favour of its keeper."""

    def __init__(self, index: int, reason: str, score_fn: Optional[Callable] = None):
        self._index = index
        self._reason = reason
        self._score_fn = score_fn

    def setup(self):
        self._counters = _Counters(self._index, self._reason)

    def process(self, joined):
        _, groups = joined
        decisions = list(groups['decision'])
        for chunk in groups['chunk']:
            if not decisions:
                self._counters.count(1, [])
                yield chunk
                continue
            keeper_id, payload = decisions[0]
            score = payload if self._score_fn is None else self._score_fn(chunk, payload)
            dropped = Dropped(chunk, self._reason, keeper_id, score)
            self._counters.count(0, [dropped])
            yield pvalue.TaggedOutput(DROPPED, dropped)


def chunk_id_key(chunk: Chunk) -> tuple[str, Chunk]:
    return chunk.chunk_id, chunk


class JoinDecisions(beam.PTransform):
    """Chunks + decisions `(dropped_id, (keeper_id, score or payload))` -> {'kept', 'dropped'}.

    A CoGroupByKey on chunk_id: each worker holds one chunk and its decision.
    `score_fn(chunk, payload)` turns the payload into the score when it is
    not the score itself.
    """

    def __init__(self, decisions, index: int, reason: str, score_fn: Optional[Callable] = None):
        super().__init__()
        self._decisions = decisions
        self._index = index
        self._reason = reason
        self._score_fn = score_fn

    def expand(self, chunks):
        outputs = (
            {'chunk': chunks | 'ChunkById' >> beam.Map(chunk_id_key), 'decision': self._decisions}
            | 'JoinOnChunkId' >> beam.CoGroupByKey()
            | 'SplitByDecision' >> beam.ParDo(SplitByDecisionFn(self._index, self._reason, self._score_fn))
            .with_outputs(DROPPED, main=KEPT)
        )
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


# --- minhash ---------------------------------------------------------------------------


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
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f'minhash threshold must be in (0, 1], got {threshold}')
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


# --- similarity family -----------------------------------------------------------------


def sim_member(chunk: Chunk, same_topic: bool, shared_entity: bool) -> candidates.SimMember:
    """What a cluster group needs of a chunk.

    Raises:
      ValueError: If the chunk lacks a feature the filter needs.
    """
    for field, needed in (('embedding', True), ('topic', same_topic), ('entities', shared_entity)):
        if needed and getattr(chunk, field) is None:
            raise ValueError(f'chunk {chunk.chunk_id} has no {field}')
    return candidates.SimMember(
        chunk.chunk_id, dedup.keep_order_key(chunk), np.asarray(chunk.embedding, np.float32),
        chunk.topic if same_topic else None,
        entity_names(chunk.entities) if shared_entity else None)


class ClusterKeysFn(beam.DoFn):
    """A batch of chunks -> `((scope, cluster id), SimMember)` for each chunk's nearest clusters."""

    def __init__(self, scope: Sequence[str], probes: int, same_topic: bool, shared_entity: bool):
        self._scope = scope
        self._probes = probes
        self._same_topic = same_topic
        self._shared_entity = shared_entity

    def process(self, batch: list[Chunk], centroids):
        members = [sim_member(c, self._same_topic, self._shared_entity) for c in batch]
        nearest = candidates.nearest_clusters(centroids, np.stack([m.embedding for m in members]), self._probes)
        for chunk, member, clusters in zip(batch, members, nearest):
            prefix = chunk_scope(chunk, self._scope)
            for cluster in clusters.tolist():
                yield (prefix, cluster), member


class VerifyGroupFn(beam.DoFn):
    """One cluster group -> its verified edges; a hot group is split in keep order (counted)."""

    def __init__(self, index: int, name: str, threshold: float, same_topic: bool, shared_entity: bool,
                 max_group: int):
        self._namespace = counter_namespace(index, name)
        self._threshold = threshold
        self._same_topic = same_topic
        self._shared_entity = shared_entity
        self._max_group = max_group

    def setup(self):
        self._split = Metrics.counter(self._namespace, SPLIT_GROUPS)
        self._edges = Metrics.counter(self._namespace, EDGES)
        self._capped = Metrics.counter(self._namespace, CAPPED)

    def process(self, group):
        _, members = group
        blocks = candidates.split_group(members, self._max_group)
        if len(blocks) > 1:
            self._split.inc()
        for block in blocks:
            edges, capped = candidates.verify_block(block, self._threshold, self._same_topic, self._shared_entity)
            self._edges.inc(len(edges))
            self._capped.inc(capped)
            yield from edges


class DropSimilarPairs(beam.PTransform):
    """Similarity [+ Topics] [+ NER] without gathering chunks.

    PCollection[Chunk] (embedded; topic / entities as needed) -> {'kept', 'dropped'}.
    A seeded KMeans trained on a bounded sample (`candidates.CLUSTER_SAMPLE`
    chunks by a stable hash of chunk_id, with the chunk count for k) gives
    `(k, dim)` centroids, a side input that stays small; each chunk goes to
    its `config.similarity_probes` nearest clusters (each probe is a
    chance to meet a close pair a cluster border splits), a GroupByKey on `(scope, cluster)` brings
    each cluster's members together, every pair there is verified by exact
    cosine (and the filter's extra condition), at most
    `candidates.MAX_EARLIER` per chunk and block, and the verified edges
    `(id, key, id, key, cosine)` are resolved by the greedy rule in keyed
    rounds (`greedy_rounds.ResolveGreedy`: only what the rounds leave is
    gathered). Same result as `filters.similarity.drop_similar` when no true edge is
    missed (recall: benchmarks/candidate_recall.py) and no chunk was capped.
    """

    def __init__(self, spec: dedup.FilterSpec, config: dedup.FilterConfig, index: int = 0,
                 same_topic: bool = False, shared_entity: bool = False,
                 cluster_size: int = candidates.CLUSTER_SIZE, max_group: int = candidates.MAX_GROUP):
        super().__init__()
        if not 0.0 < spec.threshold <= 1.0:
            raise ValueError(f'similarity threshold must be in (0, 1], got {spec.threshold}')
        if cluster_size <= 0 or max_group <= 1:
            raise ValueError(f'need cluster_size > 0, max_group > 1; got {cluster_size}, {max_group}')
        self._spec = spec
        self._config = config
        self._index = index
        self._same_topic = same_topic
        self._shared_entity = shared_entity
        self._cluster_size = cluster_size
        self._max_group = max_group

    def expand(self, chunks):
        train = functools.partial(
            candidates.train_clusters, seed=self._config.topic_seed, cluster_size=self._cluster_size)
        centroids = chunks | 'TrainClusters' >> TrainOnSample(candidates.CLUSTER_SAMPLE, train)
        decisions = (
            chunks
            | 'BatchForClusters' >> beam.BatchElements(min_batch_size=1, max_batch_size=256)
            | 'EmitClusterKeys' >> beam.ParDo(
                ClusterKeysFn(self._config.scope, self._config.similarity_probes, self._same_topic, self._shared_entity),
                beam.pvalue.AsSingleton(centroids))  # small: k centroids, trained on a bounded sample
            | 'GroupByCluster' >> beam.GroupByKey()
            | 'VerifyGroup' >> beam.ParDo(VerifyGroupFn(
                self._index, self._spec.name, self._spec.threshold, self._same_topic, self._shared_entity,
                self._max_group))
            | 'DistinctEdges' >> beam.Distinct()
            | 'ResolveGreedy' >> ResolveGreedy(counter_namespace(self._index, self._spec.name))
        )
        return chunks | 'ApplyDecisions' >> JoinDecisions(decisions, self._index, self._spec.name)


# --- NER Half ----------------------------------------------------------------------------

HOT_POSTINGS = 'hot_postings'  # entity postings compared against their first members only


def posting_entries(chunk: Chunk, scope: Sequence[str]):
    """`((scope, entity name), NerMember)` per name; a chunk without entities is in no posting.

    Raises:
      ValueError: If the chunk's entities were never extracted.
    """
    if chunk.entities is None:
        raise ValueError(f'chunk {chunk.chunk_id} has no entities')
    names = entity_names(chunk.entities)
    member = candidates.NerMember(chunk.chunk_id, dedup.keep_order_key(chunk), names)
    prefix = chunk_scope(chunk, scope)
    for name in sorted(names):
        yield (prefix, name), member


class VerifyPostingFn(beam.DoFn):
    """One entity posting -> NER Half's verified edges (hot postings capped, counted)."""

    def __init__(self, index: int, max_posting: int):
        self._namespace = counter_namespace(index, 'ner_half')
        self._max_posting = max_posting

    def setup(self):
        self._hot = Metrics.counter(self._namespace, HOT_POSTINGS)
        self._edges = Metrics.counter(self._namespace, EDGES)

    def process(self, posting):
        _, members = posting
        edges, capped = candidates.half_overlap_edges(members, self._max_posting)
        if capped:
            self._hot.inc()
        self._edges.inc(len(edges))
        yield from edges


class DropHalfEntityOverlaps(beam.PTransform):
    """NER Half without gathering chunks. PCollection[Chunk] (with entities) -> {'kept', 'dropped'}.

    An inverted index on entity names (a GroupByKey on `(scope, name)`)
    gives the candidates; each posting yields the pairs where an earlier
    chunk (keep order) holds at least half of a later one's names, and only
    those edges are resolved by the greedy rule in keyed rounds
    (`greedy_rounds.ResolveGreedy`: the most shared names, then earliest).
    Same result as `filters.ner_half.drop_ner_half` unless a hot posting was capped.
    """

    def __init__(self, config: dedup.FilterConfig, index: int = 0, max_posting: int = candidates.MAX_POSTING):
        super().__init__()
        if max_posting < 1:
            raise ValueError(f'max_posting must be >= 1, got {max_posting}')
        self._config = config
        self._index = index
        self._max_posting = max_posting

    def expand(self, chunks):
        decisions = (
            chunks
            | 'EmitPostings' >> beam.FlatMap(posting_entries, self._config.scope)
            | 'GroupByEntity' >> beam.GroupByKey()
            | 'VerifyPosting' >> beam.ParDo(VerifyPostingFn(self._index, self._max_posting))
            | 'DistinctEdges' >> beam.Distinct()
            | 'ResolveGreedy' >> ResolveGreedy(counter_namespace(self._index, 'ner_half'))
        )
        return chunks | 'ApplyDecisions' >> JoinDecisions(decisions, self._index, 'ner_half')
