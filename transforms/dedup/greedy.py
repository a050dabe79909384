"""The study's greedy keep-first rule over verified edges, decided by keyed joins in rounds.

The greedy pass (visit chunks in keep order, drop one when an already kept
chunk is close enough) keeps the lexicographically first maximal independent
set of the edge graph. Most of it can be decided without the whole graph in
one place, round by round (the parallel form of greedy MIS):

- a *root* (no earlier neighbour left) is kept, as the greedy pass keeps it;
- every later neighbour of a root is dropped (a kept chunk precedes it);
- edges touching a dropped chunk can no longer decide anything and go.

What is left after `ROUNDS` rounds (chains of chunks each dropped only by a
chunk that is itself dropped) is gathered and resolved by
`greedy_keep_first`; then each dropped chunk is given its best
kept earlier neighbour (highest score, then earliest), as the greedy pass
gives it. Same decisions as `greedy_keep_first` over all the edges, with
only the residual edges on one worker.
"""

from __future__ import annotations

import collections
from typing import Iterable

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

# Rounds decided by keyed joins before the rest is gathered. In a dense
# cluster every chunk is linked to the cluster's first chunk, so one round
# decides it; each round costs three shuffles of the remaining edges.
ROUNDS = 3
RESIDUAL_EDGES = 'residual_edges'  # edges left after the rounds, gathered on one worker

_DROPPED = 'dropped'

# An edge: (later_id, later_key, earlier_id, earlier_key, score); only the
# earlier end can drop the later one.
LATE, EARLY, EARLY_KEY, SCORE = 0, 2, 3, 4


def by_end(edge: tuple, end: int) -> tuple[str, tuple]:
    """An edge (or candidate pair: ids at 0 and 2) keyed by the chunk_id at `end`."""
    return edge[end], edge


def marker(chunk_id: str) -> tuple[str, None]:
    return chunk_id, None


def later_marker(edge: tuple) -> tuple[str, None]:
    return edge[LATE], None


def split_roots(joined):
    """Per chunk: its out-edges (to later chunks) and whether an earlier one still links to it.

    A chunk with no earlier neighbour left is a root: kept, so every later
    neighbour is dropped (tagged output, ids). Other chunks pass their
    out-edges on to the next step.
    """
    _, groups = joined
    # Whether any earlier neighbour is left (its markers are None); none is materialized.
    is_root = not any(True for _ in groups['in'])
    for edge in groups['out']:
        if is_root:
            yield pvalue.TaggedOutput(_DROPPED, edge[LATE])
        else:
            yield edge


def unless_dropped(joined):
    """The edges keyed by one of their ends, unless that end was dropped."""
    _, groups = joined
    if not list(groups[_DROPPED]):
        yield from groups['edge']


def best_keeper(joined):
    """`(dropped_id, (keeper_id, score))`: the best kept earlier neighbour of a dropped chunk.

    Best is the highest score, then the earliest in keep order, as
    `greedy_keep_first` picks it.
    """
    chunk_id, groups = joined
    if not list(groups[_DROPPED]):
        return
    edges = list(groups['edge'])
    if edges:
        best = min(edges, key=lambda e: (-e[SCORE], e[EARLY_KEY], e[EARLY]))
        yield chunk_id, (best[EARLY], best[SCORE])


class _DropEdgesAt(beam.PTransform):
    """Edges -> those whose end `end` is not among `dropped` (chunk_id markers)."""

    def __init__(self, dropped, end: int):
        super().__init__()
        self._dropped = dropped
        self._end = end

    def expand(self, edges):
        return (
            {'edge': edges | 'KeyByEnd' >> beam.Map(by_end, self._end), _DROPPED: self._dropped}
            | 'JoinDropped' >> beam.CoGroupByKey()
            | 'KeepUndropped' >> beam.FlatMap(unless_dropped)
        )


class _Round(beam.PTransform):
    """Edges -> {'edges': the edges still undecided, 'dropped': chunk_id markers dropped in this round}."""

    def expand(self, edges):
        split = (
            {'out': edges | 'KeyByEarlier' >> beam.Map(by_end, EARLY),
             'in': edges | 'MarkLater' >> beam.Map(later_marker)}
            | 'JoinNeighbours' >> beam.CoGroupByKey()
            | 'SplitRoots' >> beam.FlatMap(split_roots).with_outputs(_DROPPED, main='edges')
        )
        dropped = split[_DROPPED] | 'DistinctDropped' >> beam.Distinct() | 'Mark' >> beam.Map(marker)
        rest = (
            split['edges']
            | 'DropAtLater' >> _DropEdgesAt(dropped, LATE)
            | 'DropAtEarlier' >> _DropEdgesAt(dropped, EARLY)
        )
        return {'edges': rest, _DROPPED: dropped}


def resolve_residual(edges: Iterable[tuple], namespace: str) -> list[str]:
    """The chunks the greedy rule drops among the residual edges (ids, sorted)."""
    edges = list(edges)
    Metrics.counter(namespace, RESIDUAL_EDGES).inc(len(edges))
    return sorted(greedy_keep_first(edges))


class ResolveGreedy(beam.PTransform):
    """Verified edges -> decisions `(dropped_id, (keeper_id, score))` of the greedy rule.

    `namespace` is the filter's counter namespace (`RESIDUAL_EDGES`).
    """

    def __init__(self, namespace: str, rounds: int = ROUNDS):
        super().__init__()
        if rounds < 0:
            raise ValueError(f'rounds must be >= 0, got {rounds}')
        self._namespace = namespace
        self._rounds = rounds

    def expand(self, edges):
        remaining, dropped = edges, []
        for r in range(self._rounds):
            decided = remaining | f'Round{r + 1}' >> _Round()
            remaining = decided['edges']
            dropped.append(decided[_DROPPED])
        residual = (
            remaining
            | 'GatherResidual' >> beam.combiners.ToList()  # small: edges no round could decide
            | 'ResolveResidual' >> beam.FlatMap(resolve_residual, self._namespace)
            | 'MarkResidual' >> beam.Map(marker)
        )
        all_dropped = (dropped + [residual]) | 'AllDropped' >> beam.Flatten()
        return (
            {'edge': edges | 'KeptEarlier' >> _DropEdgesAt(all_dropped, EARLY)
             | 'KeyByLater' >> beam.Map(by_end, LATE),
             _DROPPED: all_dropped}
            | 'JoinDroppedLater' >> beam.CoGroupByKey()
            | 'BestKeeper' >> beam.FlatMap(best_keeper)
        )


def greedy_keep_first(edges: Iterable[tuple[str, tuple, str, tuple, float]]) -> dict[str, tuple[str, float]]:
    """The study's greedy rule over verified edges: `{dropped_id: (keeper_id, score)}`.

    Chunks are visited in keep order; a chunk is dropped in favour of its
    best (highest score, then earliest) neighbour already kept. A chunk's
    fate depends only on its neighbours, and theirs on their own, so it
    depends only on its connected component of the edge graph: resolving
    each component alone in keep order, or all of them in one pass as here,
    gives the same decisions. Restricted to a component, the global greedy
    visits the component's chunks in the same relative keep order and sees
    the same kept neighbours, so this equals the global greedy result
    whenever every true edge is among the given ones; chunks without an edge
    are kept by both. Edges are `(later, later_key, earlier, earlier_key,
    score)`; only the earlier end can drop the later one, as in the greedy
    pass, so directed edges (NER Half's overlap) fit too.
    """
    keys: dict[str, tuple] = {}
    earlier: dict[str, list[tuple[str, float]]] = collections.defaultdict(list)
    for late, late_key, early, early_key, score in edges:
        keys[late], keys[early] = late_key, early_key
        earlier[late].append((early, score))
    order = sorted(keys, key=lambda i: (keys[i], i))
    rank = {chunk_id: r for r, chunk_id in enumerate(order)}
    kept: set[str] = set()
    decisions = {}
    for chunk_id in order:
        best = None
        for other, score in earlier.get(chunk_id, ()):
            if other in kept and (best is None or (score, -rank[other]) > (best[1], -rank[best[0]])):
                best = (other, score)
        if best is None:
            kept.add(chunk_id)
        else:
            decisions[chunk_id] = best
    return decisions
