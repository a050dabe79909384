"""Lineage: every kept chunk lists the chunks dropped as its duplicates, through the whole cascade.

A chunk dropped by one filter as a duplicate of X, where X is dropped by a
later filter as a duplicate of Y, is represented by Y. Each hop goes to a
chunk that survived the filter that made it, so a chain has at most one hop
per filter: `ResolveLineage` follows the pointers with one keyed join
(CoGroupByKey on the pointed-to chunk_id) per filter, over the small
`(chunk_id, doc_id, duplicate_of)` records only, and `AttachRepresents`
joins the result onto the kept chunks by their chunk_id. No stage holds more
than one chunk's links.

A chain that ends at a chunk dropped with no keeper (`random`,
`intra_doc_low_salience`) is an orphan: nothing in the index represents it.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable, Mapping, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from transforms.features.embedding import EmbeddingConfig, SharedModel
from transforms.lineage.deltas import EmbedDeltas
from transforms.lineage.duplicates import TALLIES, CompareWithKeepers
from transforms.types import Chunk, Dropped

COUNTER_NAMESPACE = 'lineage'
COUNTER_REPRESENTED = 'represented'
COUNTER_ORPHANS = 'orphans'
ORPHANS = 'orphans'
RESOLVED = 'resolved'
PENDING = 'pending'
# The CoGroupByKey side carrying, for a dropped chunk, where it points.
TARGET = 'target'


@dataclasses.dataclass(frozen=True)
class Link:
    """A dropped chunk, as a kept chunk's `represents` lists it."""

    chunk_id: str
    doc_id: str


def resolve(dropped: Iterable[tuple[str, str, Optional[str]]]) -> tuple[dict[str, list[Link]], list[Link]]:
    """Follows duplicate_of chains in memory (the reference for `ResolveLineage`, and for checks).

    Args:
      dropped: `(chunk_id, doc_id, duplicate_of)` of every dropped chunk.

    Returns:
      `({final keeper chunk_id: sorted links}, sorted orphans)`; chunks
      dropped without a duplicate_of are neither.
    """
    dropped = list(dropped)
    target = {c: d for c, _, d in dropped}
    represents: dict[str, list[Link]] = collections.defaultdict(list)
    orphans = []
    for chunk_id, doc_id, duplicate_of in dropped:
        if duplicate_of is None:
            continue
        at, hops = duplicate_of, 0
        while at in target and target[at] is not None and hops <= len(target):
            at, hops = target[at], hops + 1
        if at in target:
            orphans.append(Link(chunk_id, doc_id))
        else:
            represents[at].append(Link(chunk_id, doc_id))
    return {k: sorted(v, key=_link_key) for k, v in represents.items()}, sorted(orphans, key=_link_key)


def _link_key(link: Link) -> tuple[str, str]:
    return link.chunk_id, link.doc_id


def with_represents(chunk: Chunk, links: Iterable[Link]) -> Chunk:
    """The chunk with `represents` set to the links, sorted, as `(chunk_id, doc_id)` pairs."""
    return dataclasses.replace(chunk, represents=tuple(sorted((l.chunk_id, l.doc_id) for l in links)))


def report(times: Mapping[str, int], dropped: Sequence[Mapping]) -> dict:
    """The manifest's lineage check, from the written tables.

    Args:
      times: How many kept chunks list each chunk_id in their `represents`
        (chunk ids no kept chunk lists may be absent).
      dropped: Rows with `chunk_id`, `doc_id` and `duplicate_of`.

    Returns:
      Counts of dropped chunks with a duplicate_of, those represented exactly
      once, more than once, orphans (chain ends at a chunk dropped without a
      keeper), and `ok`: every one represented exactly once unless an orphan.
    """
    times = collections.Counter(times)
    _, orphans = resolve((d['chunk_id'], d['doc_id'], d['duplicate_of']) for d in dropped)
    orphan_ids = {o.chunk_id for o in orphans}
    with_keeper = [d['chunk_id'] for d in dropped if d['duplicate_of'] is not None]
    once = sum(times[c] == 1 for c in with_keeper)
    more = sum(times[c] > 1 for c in with_keeper)
    missing = [c for c in with_keeper if times[c] == 0 and c not in orphan_ids]
    return {
        'dropped_with_duplicate_of': len(with_keeper),
        'represented_once': once,
        'represented_more_than_once': more,
        'orphans': len(orphan_ids),
        'unrepresented': sorted(missing)[:20],
        'ok': more == 0 and not missing and once + len(orphan_ids) == len(with_keeper),
    }


# --- Beam ------------------------------------------------------------------------------


def _first_link(dropped: Dropped):
    yield dropped.duplicate_of, Link(dropped.chunk.chunk_id, dropped.chunk.doc_id)


def _pointer(dropped: Dropped) -> tuple[str, Optional[str]]:
    return dropped.chunk.chunk_id, dropped.duplicate_of


class _FollowFn(beam.DoFn):
    """One hop: links pointing at a kept chunk are resolved, at a dropped one move on."""

    def process(self, element):
        target, grouped = element
        pointers = list(grouped[TARGET])
        for link in grouped[PENDING]:
            if not pointers:
                yield pvalue.TaggedOutput(RESOLVED, (target, link))
            elif pointers[0] is None:
                yield pvalue.TaggedOutput(ORPHANS, link)
            else:
                yield pointers[0], link


class ResolveLineage(beam.PTransform):
    """PCollection[Dropped] -> {'resolved': PCollection[(kept chunk_id, Link)], 'orphans': PCollection[Link]}.

    `hops` keyed joins, one per filter (a chain's maximum length); a link
    still pointing at a dropped chunk after them (impossible for the
    filters' chains) counts as an orphan.
    """

    def __init__(self, hops: int):
        super().__init__()
        self._hops = hops

    def expand(self, dropped):
        pointers = dropped | 'KeyPointers' >> beam.Map(_pointer)
        pending = dropped | 'DroppedWithKeeper' >> beam.Filter(_has_keeper) | 'FirstLinks' >> beam.FlatMap(_first_link)
        resolved, orphans = [], []
        for hop in range(self._hops):
            outputs = (
                {PENDING: pending, TARGET: pointers}
                | f'JoinHop{hop}' >> beam.CoGroupByKey()
                | f'FollowHop{hop}' >> beam.ParDo(_FollowFn()).with_outputs(RESOLVED, ORPHANS, main=PENDING)
            )
            pending = outputs[PENDING]
            resolved.append(outputs[RESOLVED])
            orphans.append(outputs[ORPHANS])
        orphans.append(pending | 'UnresolvedLinks' >> beam.Values())
        if not resolved:  # no filters: nothing is dropped
            resolved.append(dropped.pipeline | 'NoLinks' >> beam.Create([]))
        return {
            RESOLVED: resolved | 'FlattenResolved' >> beam.Flatten(),
            ORPHANS: orphans | 'FlattenOrphans' >> beam.Flatten(),
        }


def _has_keeper(dropped: Dropped) -> bool:
    return dropped.duplicate_of is not None


def _keyed_chunk(chunk: Chunk) -> tuple[str, Chunk]:
    return chunk.chunk_id, chunk


class _AttachFn(beam.DoFn):
    def setup(self):
        self._represented = Metrics.counter(COUNTER_NAMESPACE, COUNTER_REPRESENTED)

    def process(self, element):
        _, grouped = element
        links = list(grouped['links'])
        for chunk in grouped['chunk']:
            self._represented.inc(len(links))
            yield with_represents(chunk, links)


class AttachRepresents(beam.PTransform):
    """Sets `represents` on the kept chunks.

    {'kept': PCollection[Chunk], 'resolved': PCollection[(chunk_id, Link)]} ->
    PCollection[Chunk], joined by a CoGroupByKey on the kept chunk's id.
    """

    def expand(self, pcolls):
        return (
            {'chunk': pcolls['kept'] | 'KeyKept' >> beam.Map(_keyed_chunk), 'links': pcolls[RESOLVED]}
            | 'JoinLinks' >> beam.CoGroupByKey()
            | 'SetRepresents' >> beam.ParDo(_AttachFn())
        )


class _CountOrphansFn(beam.DoFn):
    def setup(self):
        self._orphans = Metrics.counter(COUNTER_NAMESPACE, COUNTER_ORPHANS)

    def process(self, link: Link):
        self._orphans.inc()
        return ()


class TraceDuplicates(beam.PTransform):
    """Lineage, deltas and the lossless audit of a filtered corpus: what the index keeps of each dropped chunk.

    Input: a dict with 'documents' (PCollection[Document]), 'kept'
    (PCollection[Chunk]) and 'dropped' (PCollection[Dropped]). Output:
    {'chunks': PCollection[Chunk]: the kept chunks with `represents` set,
    plus (with `deltas`) the embedded delta chunks, each with `delta_of` the
    kept chunk representing its source; 'tallies':
    PCollection[lossless.Tally], the audit of every dropped duplicate's
    sentences against them (`lineage.lossless`)}.
    """

    def __init__(self, hops: int, deltas: bool, semantic_deltas: bool,
                 model: SharedModel, embedding: EmbeddingConfig):
        super().__init__()
        self._hops = hops
        self._deltas = deltas
        self._semantic = semantic_deltas
        self._model = model
        self._embedding = embedding

    def expand(self, pcolls):
        lineage = pcolls['dropped'] | 'ResolveLineage' >> ResolveLineage(self._hops)
        _ = lineage[ORPHANS] | 'CountOrphans' >> beam.ParDo(_CountOrphansFn())
        kept = {'kept': pcolls['kept'], RESOLVED: lineage[RESOLVED]} | 'AttachRepresents' >> AttachRepresents()
        compared = (
            {'documents': pcolls['documents'], 'kept': pcolls['kept'], 'dropped': pcolls['dropped'],
             'resolved': lineage[RESOLVED]}
            | 'CompareWithKeepers' >> CompareWithKeepers(self._deltas, self._semantic)
        )
        if not self._deltas:
            return {'chunks': kept, TALLIES: compared[TALLIES]}
        deltas = compared['deltas'] | 'EmbedDeltas' >> EmbedDeltas(self._model, self._embedding)
        return {'chunks': (kept, deltas) | 'KeptAndDeltas' >> beam.Flatten(), TALLIES: compared[TALLIES]}
