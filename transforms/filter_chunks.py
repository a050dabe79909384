"""The filtering stage: redundancy filters as Beam transforms, each splitting kept from dropped."""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
from typing import Callable, Iterable, Sequence

import apache_beam as beam
import numpy as np
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from transforms import dedup
from transforms.scope import chunk_scope
from transforms.minhash import band_keys, is_empty_signature
from transforms.types import Chunk, Dropped

LOG = logging.getLogger('ragsieve.build')

KEPT = 'kept'
DROPPED = 'dropped'

# Filters that compare every surviving chunk with every other, in one global
# greedy order: they run on one worker over the gathered chunks.
GLOBAL_FILTERS = frozenset(
    {'similarity', 'similarity_topics', 'similarity_ner', 'similarity_topics_ner', 'ner_exact', 'ner_half'}
)


def counter_namespace(index: int, name: str) -> str:
    """Metrics namespace of the `index`-th filter (from 0), e.g. `filter_0_exact`."""
    return f'filter_{index}_{name}'


def step_label(index: int, name: str) -> str:
    """Step label of the `index`-th filter, e.g. `Filter0Exact`."""
    return f'Filter{index}' + ''.join(part.capitalize() for part in name.split('_'))


class _Counters:
    """Counters `in`, `kept`, `dropped` and `dropped_{reason}` of one filter."""

    def __init__(self, index: int, name: str):
        self._namespace = counter_namespace(index, name)
        self._in = Metrics.counter(self._namespace, 'in')
        self._kept = Metrics.counter(self._namespace, 'kept')
        self._dropped = Metrics.counter(self._namespace, 'dropped')

    def count(self, kept: int, dropped: Sequence[Dropped]) -> None:
        self._in.inc(kept + len(dropped))
        self._kept.inc(kept)
        self._dropped.inc(len(dropped))
        for reason, n in collections.Counter(d.reason for d in dropped).items():
            Metrics.counter(self._namespace, f'dropped_{reason}').inc(n)


def _split_outputs(kept: Iterable[Chunk], dropped: Iterable[Dropped]):
    yield from kept
    for d in dropped:
        yield pvalue.TaggedOutput(DROPPED, d)


# --- group-wise filters: a pure function over a group of chunks -----------------------


def drop_exact_group(chunks: Iterable[Chunk]) -> tuple[list[Chunk], list[Dropped]]:
    """`dedup.drop_exact` over one content_hash group, sorted first (not runner order)."""
    return dedup.drop_exact(sorted(chunks, key=dedup.keep_order_key))


def drop_global(chunks: Iterable[Chunk], spec: dedup.FilterSpec) -> tuple[list[Chunk], list[Dropped]]:
    """Applies a global filter (similarity*, ner_*) to all chunks, in canonical order.

    Raises:
      ValueError: If `spec` is not a global filter.
    """
    if spec.name not in GLOBAL_FILTERS:
        raise ValueError(f'{spec.name!r} is not a global filter')
    return dedup.apply_filter(list(chunks), spec)


class ApplyFilterFn(beam.DoFn):
    """Applies `fn(chunks) -> (kept, dropped)` to each group; dropped go to a tagged output."""

    def __init__(self, index: int, name: str, fn: Callable):
        self._index = index
        self._name = name
        self._fn = fn

    def setup(self):
        self._counters = _Counters(self._index, self._name)

    def process(self, chunks: Iterable[Chunk]):
        kept, dropped = self._fn(list(chunks))
        self._counters.count(len(kept), dropped)
        yield from _split_outputs(kept, dropped)


class DropExactDuplicates(beam.PTransform):
    """ExactNorm. PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.

    A GroupByKey on `(scope, content_hash)`; each group keeps its first chunk
    by `dedup.keep_order_key`.
    """

    def __init__(self, index: int = 0, scope: tuple[str, ...] = ()):
        super().__init__()
        self._index = index
        self._scope = scope

    def expand(self, chunks):
        outputs = (
            chunks
            | 'KeyByContentHash' >> beam.Map(keyed_by, content_hash_of, self._scope)
            | 'GroupByContentHash' >> beam.GroupByKey()
            | 'ContentHashGroups' >> beam.Values()
            | 'KeepOnePerHash' >> beam.ParDo(ApplyFilterFn(self._index, 'exact', drop_exact_group))
            .with_outputs(DROPPED, main=KEPT)
        )
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


def content_hash_of(chunk: Chunk) -> str:
    """The key of `exact`: the hash of the normalized text."""
    return chunk.content_hash


def keyed_by(chunk: Chunk, key_fn: Callable[[Chunk], str], scope: Sequence[str]) -> tuple[tuple[str, str], Chunk]:
    """`((scope key, key_fn(chunk)), chunk)`: a filter's grouping key, never across scopes."""
    return (chunk_scope(chunk, scope), key_fn(chunk)), chunk


def scope_of(chunk: Chunk, scope: Sequence[str]) -> str:
    """The partition key of the global filters: one greedy pass per scope."""
    return chunk_scope(chunk, scope)


def doc_id_of(chunk: Chunk) -> str:
    """The key of `intra_doc`: the chunk's document."""
    return chunk.doc_id


class DropGlobally(beam.PTransform):
    """Similarity [+ Topics] [+ NER], NER Exact, NER Half.

    PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.
    The study's greedy rule visits all chunks in one global order, so the
    surviving chunks of each scope are gathered on one worker (a GroupByKey
    on the scope key: the whole corpus when no scope is set) and the pure
    `dedup` filter (FAISS candidate search inside) decides.
    """

    def __init__(self, spec: dedup.FilterSpec, index: int = 0, scope: tuple[str, ...] = ()):
        super().__init__()
        if spec.name not in GLOBAL_FILTERS:
            raise ValueError(f'{spec.name!r} is not a global filter; expected one of {sorted(GLOBAL_FILTERS)}')
        self._spec = spec
        self._index = index
        self._scope = scope

    def expand(self, chunks):
        fn = functools.partial(drop_global, spec=self._spec)
        outputs = (
            chunks
            | 'KeyByScope' >> beam.WithKeys(scope_of, self._scope)
            | 'GatherScope' >> beam.GroupByKey()
            | 'ScopeGroups' >> beam.Values()
            | 'DropRedundant' >> beam.ParDo(ApplyFilterFn(self._index, self._spec.name, fn))
            .with_outputs(DROPPED, main=KEPT)
        )
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


# --- intra_doc -----------------------------------------------------------------------


def intra_doc_group(
    chunks: Iterable[Chunk], spec: dedup.FilterSpec, config: dedup.FilterConfig
) -> tuple[list[Chunk], list[Dropped], list[tuple[str, float, float]]]:
    """`dedup.intra_doc` over one document's chunks, sorted by chunk_index first.

    Returns:
      `(kept, dropped, lifted)`; `lifted` lists `(chunk_id, before, after)`
      for kept chunks whose boost lifted their salience from at most
      `config.warn_salience` to above it.
    """
    ordered = sorted(chunks, key=Chunk.sort_key)
    kept, dropped = dedup.intra_doc(
        ordered, spec.threshold, config.intra_doc_min_salience,
        config.intra_doc_boost, config.intra_doc_boost_mode)
    with_embedding = [c for c in ordered if c.embedding is not None]
    base = {}
    if with_embedding:
        scores = dedup.salience(np.stack([c.embedding for c in with_embedding]))
        base = {c.chunk_id: float(s) for c, s in zip(with_embedding, scores)}
    lifted = [
        (c.chunk_id, base[c.chunk_id], c.salience)
        for c in kept
        if c.chunk_id in base and base[c.chunk_id] <= config.warn_salience < c.salience
    ]
    return kept, dropped, lifted


class IntraDocFn(beam.DoFn):
    def __init__(self, index: int, spec: dedup.FilterSpec, config: dedup.FilterConfig):
        self._index = index
        self._spec = spec
        self._config = config

    def setup(self):
        self._counters = _Counters(self._index, 'intra_doc')
        self._lifted = Metrics.counter(counter_namespace(self._index, 'intra_doc'), 'salience_warnings')

    def process(self, chunks: Iterable[Chunk]):
        kept, dropped, lifted = intra_doc_group(chunks, self._spec, self._config)
        for chunk_id, before, after in lifted:
            LOG.warning('intra_doc boost lifted the salience of %s from %.3f to %.3f (above %.2f)',
                        chunk_id, before, after, self._config.warn_salience)
        self._lifted.inc(len(lifted))
        self._counters.count(len(kept), dropped)
        yield from _split_outputs(kept, dropped)


class DropIntraDocRedundancy(beam.PTransform):
    """klarRAG ingestion dedup per document; sets (and boosts) `salience` on kept chunks.

    PCollection[Chunk] (embedded) -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.
    A GroupByKey on `(scope, doc_id)`, then `dedup.intra_doc` per document
    (a document has one scope; the key carries it so every filter keys alike).
    """

    def __init__(self, spec: dedup.FilterSpec, config: dedup.FilterConfig, index: int = 0):
        super().__init__()
        self._spec = spec
        self._config = config
        self._index = index

    def expand(self, chunks):
        outputs = (
            chunks
            | 'KeyByDocument' >> beam.Map(keyed_by, doc_id_of, self._config.scope)
            | 'GroupByDocument' >> beam.GroupByKey()
            | 'DocumentGroups' >> beam.Values()
            | 'DedupWithinDocument' >> beam.ParDo(IntraDocFn(self._index, self._spec, self._config))
            .with_outputs(DROPPED, main=KEPT)
        )
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


# --- random ----------------------------------------------------------------------------


class RandomFn(beam.DoFn):
    def __init__(self, index: int, ratio: float, seed: int):
        self._index = index
        self._ratio = ratio
        self._seed = seed

    def setup(self):
        self._counters = _Counters(self._index, 'random')

    def process(self, chunk: Chunk):
        kept, dropped = dedup.drop_random([chunk], self._ratio, self._seed)
        self._counters.count(len(kept), dropped)
        yield from _split_outputs(kept, dropped)


class DropRandomly(beam.PTransform):
    """Random control: each chunk dropped with probability `ratio`, seeded by its id.

    PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.
    """

    def __init__(self, ratio: float, seed: int, index: int = 0):
        super().__init__()
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f'random ratio must be in [0, 1], got {ratio}')
        self._ratio = ratio
        self._seed = seed
        self._index = index

    def expand(self, chunks):
        outputs = chunks | 'DrawAndSplit' >> beam.ParDo(
            RandomFn(self._index, self._ratio, self._seed)).with_outputs(DROPPED, main=KEPT)
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


# --- minhash ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BandMember:
    """What an LSH bucket holds of a chunk: enough to verify and to resolve groups."""

    chunk_id: str
    keep_key: tuple
    minhash: np.ndarray


def band_entries(chunk: Chunk, b: int, r: int, scope: Sequence[str] = ()):
    """Yields `((scope key, band_key), BandMember)` for each LSH band of a chunk's signature.

    The scope key in the bucket key means chunks of different scopes never
    share a bucket, so they are never candidates.

    Chunks with an empty shingle set are never grouped (two empty signatures
    would estimate Jaccard 1.0).

    Raises:
      ValueError: If the chunk has no signature.
    """
    if chunk.minhash is None:
        raise ValueError(f'chunk {chunk.chunk_id} has no minhash signature')
    if is_empty_signature(chunk.minhash):
        return
    member = BandMember(chunk.chunk_id, dedup.keep_order_key(chunk), np.asarray(chunk.minhash, np.uint64))
    prefix = chunk_scope(chunk, scope)
    for key in band_keys(member.minhash, b, r):
        yield (prefix, key), member


def verified_edges(bucket: tuple[bytes, Iterable[BandMember]], threshold: float):
    """Yields `(a, b)` BandMember pairs of a bucket whose estimated Jaccard >= threshold.

    Members are sorted by chunk_id so the edges do not depend on runner order.
    """
    _, members = bucket
    by_id = {m.chunk_id: m for m in members}
    ordered = [by_id[k] for k in sorted(by_id)]
    for x in range(len(ordered)):
        for y in range(x + 1, len(ordered)):
            a, b = ordered[x], ordered[y]
            if np.count_nonzero(a.minhash == b.minhash) / a.minhash.shape[0] >= threshold:
                yield a, b


def resolve_components(edges: Iterable[tuple[BandMember, BandMember]]) -> dict[str, tuple[str, float]]:
    """Groups the verified edges into components and picks each one's keeper.

    Returns:
      `{dropped chunk_id: (keeper chunk_id, estimated Jaccard to the keeper)}`.
    """
    members: dict[str, BandMember] = {}
    pairs = set()
    for a, b in edges:
        members[a.chunk_id] = a
        members[b.chunk_id] = b
        pairs.add((a.chunk_id, b.chunk_id))
    decisions = {}
    for component in dedup.connected_components(sorted(members), sorted(pairs)):
        keeper = members[min(component, key=lambda i: members[i].keep_key)]
        for chunk_id in component:
            if chunk_id != keeper.chunk_id:
                sig = members[chunk_id].minhash
                score = float(np.count_nonzero(sig == keeper.minhash)) / sig.shape[0]
                decisions[chunk_id] = (keeper.chunk_id, score)
    return decisions


class SplitByDecisionFn(beam.DoFn):
    def __init__(self, index: int, reason: str):
        self._index = index
        self._reason = reason

    def setup(self):
        self._counters = _Counters(self._index, self._reason)

    def process(self, chunk: Chunk, decisions: dict):
        decision = decisions.get(chunk.chunk_id)
        if decision is None:
            self._counters.count(1, [])
            yield chunk
        else:
            dropped = Dropped(chunk, self._reason, decision[0], decision[1])
            self._counters.count(0, [dropped])
            yield pvalue.TaggedOutput(DROPPED, dropped)


class DropNearDuplicates(beam.PTransform):
    """MinHash-LSH. PCollection[Chunk] (with minhash) -> {'kept', 'dropped'}.

    Candidate pairs come from a GroupByKey on LSH band keys (never all
    pairs) and are verified by estimated Jaccard in their bucket; only the
    verified edges are gathered on one worker, grouped into connected
    components (`dedup.connected_components`), and each component keeps its
    first chunk by `dedup.keep_order_key`. The decisions reach the chunks as a
    side input. Same result as `dedup.drop_minhash_groups`.
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
        decisions = (
            chunks
            | 'EmitBandKeys' >> beam.FlatMap(band_entries, self._b, self._r, self._scope)
            | 'GroupByBand' >> beam.GroupByKey()
            | 'VerifyPairs' >> beam.FlatMap(verified_edges, self._threshold)
            | 'GatherEdges' >> beam.combiners.ToList()
            | 'ResolveComponents' >> beam.Map(resolve_components)
        )
        outputs = chunks | 'SplitByDecision' >> beam.ParDo(
            SplitByDecisionFn(self._index, 'minhash'), beam.pvalue.AsSingleton(decisions)
        ).with_outputs(DROPPED, main=KEPT)
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


# --- the sequence ----------------------------------------------------------------------


def filter_transform(index: int, spec: dedup.FilterSpec, config: dedup.FilterConfig) -> beam.PTransform:
    """The transform of one filter, the `index`-th of the run.

    Raises:
      ValueError: For an unknown filter name.
    """
    name = spec.name
    if name == 'exact':
        return DropExactDuplicates(index, config.scope)
    if name == 'minhash':
        b, r = config.minhash_config(spec.threshold).bands()
        return DropNearDuplicates(spec.threshold, b, r, index, config.scope)
    if name == 'random':
        return DropRandomly(spec.threshold, config.random_seed, index)
    if name == 'intra_doc':
        return DropIntraDocRedundancy(spec, config, index)
    if name in GLOBAL_FILTERS:
        return DropGlobally(spec, index, config.scope)
    raise ValueError(f'unknown filter {name!r}')


class FilterChunks(beam.PTransform):
    """Applies the configured filters in order.

    PCollection[Chunk] (with the features the filters need) ->
    {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}; every
    input chunk is in exactly one of the two.
    """

    def __init__(self, config: dedup.FilterConfig):
        super().__init__()
        self._config = config

    def expand(self, chunks):
        dropped = []
        for index, spec in enumerate(self._config.specs):
            outputs = chunks | step_label(index, spec.name) >> filter_transform(index, spec, self._config)
            chunks = outputs[KEPT]
            dropped.append(outputs[DROPPED])
        if not dropped:
            dropped.append(chunks.pipeline | 'NoFilters' >> beam.Create([]))
        return {KEPT: chunks, DROPPED: tuple(dropped) | 'FlattenDropped' >> beam.Flatten()}
