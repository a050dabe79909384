"""The similarity family in the build: cluster keys -> blocks -> verified edges -> greedy rounds."""

from __future__ import annotations

import functools
from typing import Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.filters.similarity import candidates
from transforms.dedup.greedy import ResolveGreedy
from transforms.dedup.keep import keep_order_key
from transforms.dedup.scope import chunk_scope
from transforms.dedup.stage_parts import CAPPED, EDGES, SPLIT_GROUPS, JoinDecisions, counter_namespace
from transforms.features.compute import TrainOnSample
from transforms.features.entities import entity_names
from transforms.types import Chunk
from transforms.validate import check_threshold


def sim_member(chunk: Chunk, same_topic: bool, shared_entity: bool) -> candidates.SimMember:
    """What a cluster group needs of a chunk.

    Raises:
      ValueError: If the chunk lacks a feature the filter needs.
    """
    for field, needed in (('embedding', True), ('topic', same_topic), ('entities', shared_entity)):
        if needed and getattr(chunk, field) is None:
            raise ValueError(f'chunk {chunk.chunk_id} has no {field}')
    return candidates.SimMember(
        chunk.chunk_id, keep_order_key(chunk), np.asarray(chunk.embedding, np.float32),
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
    rounds (`greedy.ResolveGreedy`: only what the rounds leave is
    gathered). Same result as `filters.similarity.drop_similar` when no true edge is
    missed (recall: benchmarks/studies/candidate_recall.py) and no chunk was capped.
    """

    def __init__(self, spec: FilterSpec, config: FilterConfig, index: int = 0,
                 same_topic: bool = False, shared_entity: bool = False,
                 cluster_size: int = candidates.CLUSTER_SIZE, max_group: int = candidates.MAX_GROUP):
        super().__init__()
        check_threshold('similarity threshold', spec.threshold)
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
            candidates.train_clusters, seed=self._config.features.topic_seed, cluster_size=self._cluster_size)
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


def stage(index: int, spec: FilterSpec, config: FilterConfig, definition) -> beam.PTransform:
    """The `index`-th filter of the run as a Beam stage (`stages.filter_transform` calls it)."""
    return DropSimilarPairs(spec, config, index, **definition.options)
