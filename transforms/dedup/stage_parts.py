"""What the filters' Beam stages share: step labels, counters, the kept/dropped outputs, decision joins."""

from __future__ import annotations

import collections
import logging
from typing import Callable, Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from transforms import progress
from transforms.dedup.scope import chunk_scope
from transforms.types import Chunk, Dropped

LOG = logging.getLogger('ragsieve.build')

# The two outputs of every filter stage.
KEPT = 'kept'
DROPPED = 'dropped'

# Counter (in each filter's namespace) of the chunks a grouped filter keeps
# without grouping them (e.g. `ner_exact`: a chunk without entities).
UNGROUPED = 'kept_ungrouped'


def counter_namespace(index: int, name: str) -> str:
    """Metrics namespace of the `index`-th filter (from 0), e.g. `filter_0_exact`."""
    return f'filter_{index}_{name}'


def step_label(index: int, name: str) -> str:
    """Step label of the `index`-th filter, e.g. `Filter0Exact`."""
    return f'Filter{index}' + ''.join(part.capitalize() for part in name.split('_'))


class Counters:
    """Counters `in`, `kept`, `dropped` and `dropped_{reason}` of one filter."""

    def __init__(self, index: int, name: str):
        self._namespace = counter_namespace(index, name)
        self._in = Metrics.counter(self._namespace, 'in')
        self._kept = Metrics.counter(self._namespace, 'kept')
        self._dropped = Metrics.counter(self._namespace, 'dropped')
        self._live = progress.Tally()

    def count(self, kept: int, dropped: Sequence[Dropped]) -> None:
        self._in.inc(kept + len(dropped))
        self._kept.inc(kept)
        self._dropped.inc(len(dropped))
        self._live.count(progress.filter_key(self._namespace, progress.KEPT), kept)
        self._live.count(progress.filter_key(self._namespace, progress.DROPPED), len(dropped))
        for reason, n in collections.Counter(d.reason for d in dropped).items():
            Metrics.counter(self._namespace, f'dropped_{reason}').inc(n)


def split_outputs(kept: Iterable[Chunk], dropped: Iterable[Dropped]):
    yield from kept
    for d in dropped:
        yield pvalue.TaggedOutput(DROPPED, d)


def keyed_by(chunk: Chunk, key_fn: Callable[[Chunk], str], scope: Sequence[str]) -> tuple[tuple[str, str], Chunk]:
    """`((scope key, key_fn(chunk)), chunk)`: a filter's grouping key, never across scopes."""
    return (chunk_scope(chunk, scope), key_fn(chunk)), chunk


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
        self._counters = Counters(self._index, self._reason)

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
