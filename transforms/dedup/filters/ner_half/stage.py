"""NER Half in the build: entity postings -> verified edges -> greedy rounds."""

from __future__ import annotations

from typing import Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.filters.ner_half.decision import MAX_POSTING, NerMember, half_overlap_edges
from transforms.dedup.greedy import ResolveGreedy
from transforms.dedup.keep import keep_order_key
from transforms.dedup.scope import chunk_scope
from transforms.dedup.stage_parts import EDGES, JoinDecisions, counter_namespace
from transforms.features.entities import entity_names
from transforms.types import Chunk

HOT_POSTINGS = 'hot_postings'  # entity postings compared against their first members only


def posting_entries(chunk: Chunk, scope: Sequence[str]):
    """`((scope, entity name), NerMember)` per name; a chunk without entities is in no posting.

    Raises:
      ValueError: If the chunk's entities were never extracted.
    """
    if chunk.entities is None:
        raise ValueError(f'chunk {chunk.chunk_id} has no entities')
    names = entity_names(chunk.entities)
    member = NerMember(chunk.chunk_id, keep_order_key(chunk), names)
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
        edges, capped = half_overlap_edges(members, self._max_posting)
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
    (`greedy.ResolveGreedy`: the most shared names, then earliest).
    Same result as `filters.ner_half.drop_ner_half` unless a hot posting was capped.
    """

    def __init__(self, config: FilterConfig, index: int = 0, max_posting: int = MAX_POSTING):
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


def stage(index: int, spec: FilterSpec, config: FilterConfig, definition) -> beam.PTransform:
    """The `index`-th filter of the run as a Beam stage (`stages.filter_transform` calls it)."""
    return DropHalfEntityOverlaps(config, index)
