"""The filtering stage: redundancy filters as Beam transforms, each splitting kept from dropped."""

from __future__ import annotations

import collections
import functools
import logging
from typing import Callable, Iterable, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from transforms import dedup, filters
from transforms.embedding import EmbeddingConfig, SharedModel
from transforms.features import ComputeFeatures, dropped_with_features, feature_plan
from transforms.filters.intra_doc import intra_doc, salience
from transforms.scope import chunk_scope
from transforms.types import Chunk, Dropped

LOG = logging.getLogger('ragsieve.build')

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


def decide_group(chunks: Iterable[Chunk], spec: dedup.FilterSpec, config: dedup.FilterConfig):
    """A grouped filter's decision over one group, sorted first (not runner order)."""
    return filters.get(spec.name).decide(sorted(chunks, key=Chunk.sort_key), spec.threshold, config)


def drop_exact_group(chunks: Iterable[Chunk]) -> tuple[list[Chunk], list[Dropped]]:
    """`exact` over one content_hash group."""
    return decide_group(chunks, dedup.FilterSpec('exact'), dedup.FilterConfig())


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


class DropByKey(beam.PTransform):
    """A `GROUPED` filter. PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.

    A GroupByKey on `(scope, group_key(chunk))`; the filter's `decide` runs
    per group. A chunk whose group key is None is kept without grouping
    (counted as `kept_ungrouped`), so it cannot make a hot group.
    """

    def __init__(self, spec: dedup.FilterSpec, config: dedup.FilterConfig, index: int = 0):
        super().__init__()
        definition = filters.get(spec.name)
        if definition.strategy != filters.GROUPED:
            raise ValueError(f'{spec.name!r} is not a grouped filter')
        self._spec = spec
        self._config = config
        self._index = index
        self._key_fn = definition.group_key

    def expand(self, chunks):
        keyed = chunks | 'KeyByGroup' >> beam.ParDo(KeyOrPassFn(self._index, self._spec.name, self._key_fn, self._config.scope)).with_outputs(KEPT, main='keyed')
        fn = functools.partial(decide_group, spec=self._spec, config=self._config)
        outputs = (
            keyed['keyed']
            | 'GroupByKey' >> beam.GroupByKey()
            | 'Groups' >> beam.Values()
            | 'DecidePerGroup' >> beam.ParDo(ApplyFilterFn(self._index, self._spec.name, fn))
            .with_outputs(DROPPED, main=KEPT)
        )
        kept = (outputs[KEPT], keyed[KEPT]) | 'FlattenKept' >> beam.Flatten()
        return {KEPT: kept, DROPPED: outputs[DROPPED]}


class KeyOrPassFn(beam.DoFn):
    """Keys a chunk by `(scope, key_fn(chunk))`; a None key goes straight to `kept`."""

    def __init__(self, index: int, name: str, key_fn: Callable, scope: Sequence[str]):
        self._index = index
        self._name = name
        self._key_fn = key_fn
        self._scope = scope

    def setup(self):
        self._counters = _Counters(self._index, self._name)
        self._ungrouped = Metrics.counter(counter_namespace(self._index, self._name), UNGROUPED)

    def process(self, chunk: Chunk):
        key = self._key_fn(chunk)
        if key is None:
            self._counters.count(1, [])
            self._ungrouped.inc()
            yield pvalue.TaggedOutput(KEPT, chunk)
        else:
            yield (chunk_scope(chunk, self._scope), key), chunk


def DropExactDuplicates(index: int = 0, scope: tuple[str, ...] = ()) -> DropByKey:
    """ExactNorm: a GroupByKey on `(scope, content_hash)`, one chunk kept per group."""
    return DropByKey(dedup.FilterSpec('exact'), dedup.FilterConfig(scope=scope), index)


def keyed_by(chunk: Chunk, key_fn: Callable[[Chunk], str], scope: Sequence[str]) -> tuple[tuple[str, str], Chunk]:
    """`((scope key, key_fn(chunk)), chunk)`: a filter's grouping key, never across scopes."""
    return (chunk_scope(chunk, scope), key_fn(chunk)), chunk


# --- intra_doc -----------------------------------------------------------------------


def intra_doc_group(
    chunks: Iterable[Chunk], spec: dedup.FilterSpec, config: dedup.FilterConfig
) -> tuple[list[Chunk], list[Dropped], list[tuple[str, float, float]]]:
    """`filters.intra_doc.intra_doc` over one document's chunks, sorted by chunk_index first.

    Returns:
      `(kept, dropped, lifted)`; `lifted` lists `(chunk_id, before, after)`
      for kept chunks whose boost lifted their salience from at most
      `config.warn_salience` to above it.
    """
    ordered = sorted(chunks, key=Chunk.sort_key)
    kept, dropped = intra_doc(
        ordered, spec.threshold, config.intra_doc_min_salience,
        config.intra_doc_boost, config.intra_doc_boost_mode)
    with_embedding = [c for c in ordered if c.embedding is not None]
    base = {}
    if with_embedding:
        scores = salience(np.stack([c.embedding for c in with_embedding]))
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
    A GroupByKey on `(scope, doc_id)`, then `filters.intra_doc.intra_doc` per document
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
            | 'KeyByDocument' >> beam.Map(keyed_by, filters.get('intra_doc').group_key, self._config.scope)
            | 'GroupByDocument' >> beam.GroupByKey()
            | 'DocumentGroups' >> beam.Values()
            | 'DedupWithinDocument' >> beam.ParDo(IntraDocFn(self._index, self._spec, self._config))
            .with_outputs(DROPPED, main=KEPT)
        )
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


# --- per chunk -------------------------------------------------------------------------


class PerChunkFn(beam.DoFn):
    def __init__(self, index: int, spec: dedup.FilterSpec, config: dedup.FilterConfig):
        self._index = index
        self._spec = spec
        self._config = config

    def setup(self):
        self._counters = _Counters(self._index, self._spec.name)
        self._decide = filters.get(self._spec.name).decide

    def process(self, chunk: Chunk):
        kept, dropped = self._decide([chunk], self._spec.threshold, self._config)
        self._counters.count(len(kept), dropped)
        yield from _split_outputs(kept, dropped)


class DropPerChunk(beam.PTransform):
    """A `PER_CHUNK` filter (e.g. `random`): each chunk decided alone.

    PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.
    """

    def __init__(self, spec: dedup.FilterSpec, config: dedup.FilterConfig, index: int = 0):
        super().__init__()
        if filters.get(spec.name).strategy != filters.PER_CHUNK:
            raise ValueError(f'{spec.name!r} is not a per-chunk filter')
        self._spec = spec
        self._config = config
        self._index = index

    def expand(self, chunks):
        outputs = chunks | 'DecideAndSplit' >> beam.ParDo(
            PerChunkFn(self._index, self._spec, self._config)).with_outputs(DROPPED, main=KEPT)
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


def DropRandomly(ratio: float, seed: int, index: int = 0) -> DropPerChunk:
    """Random control: each chunk dropped with probability `ratio`, seeded by its id."""
    return DropPerChunk(dedup.FilterSpec('random', ratio), dedup.FilterConfig(random_seed=seed), index)


# --- the sequence ----------------------------------------------------------------------


def filter_transform(index: int, spec: dedup.FilterSpec, config: dedup.FilterConfig) -> beam.PTransform:
    """The transform of one filter, the `index`-th of the run, chosen by its registered strategy.

    Raises:
      ValueError: For an unknown filter name.
    """
    definition = filters.get(spec.name)
    if definition.beam_transform is not None:
        return definition.beam_transform(index, spec, config)
    if definition.strategy == filters.PER_CHUNK:
        return DropPerChunk(spec, config, index)
    if definition.strategy == filters.GROUPED:
        return DropByKey(spec, config, index)
    raise ValueError(f'filter {spec.name!r}: strategy {definition.strategy!r} needs a beam_transform')


class FilterChunks(beam.PTransform):
    """Applies the configured filters in order, computing features lazily when given the model.

    PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped':
    PCollection[Dropped]}; every input chunk is in exactly one of the two.

    With `model` and `embedding`, each feature is computed just before the
    first filter that needs it, on the chunks the filters before it kept
    (`features.feature_plan`), and the kept chunks are embedded at the end if
    no filter did it. A dropped chunk carries exactly the features the plan
    had given it by then, whatever the feature cache held: its dropped/ row
    says so, and a rebuild writes the same bytes as a fresh build. Without a
    model the chunks must carry the features the filters need.
    """

    def __init__(self, config: dedup.FilterConfig, model: Optional[SharedModel] = None,
                 embedding: Optional[EmbeddingConfig] = None):
        super().__init__()
        self._config = config
        self._model = model
        self._embedding = embedding
        self._plan = feature_plan(config) if model is not None else None

    def _features(self, chunks, label: str, needed: Sequence[str]):
        if not needed:
            return chunks
        return chunks | label >> ComputeFeatures(self._config, needed, self._model, self._embedding)

    def expand(self, chunks):
        dropped = []
        given: tuple[str, ...] = ()
        for index, spec in enumerate(self._config.specs):
            label = step_label(index, spec.name)
            if self._plan is not None:
                chunks = self._features(chunks, f'{label}Features', self._plan[index])
                given += self._plan[index]
            outputs = chunks | label >> filter_transform(index, spec, self._config)
            chunks = outputs[KEPT]
            if self._plan is not None:
                dropped.append(outputs[DROPPED] | f'{label}DroppedFeatures' >> beam.Map(
                    dropped_with_features, given))
            else:
                dropped.append(outputs[DROPPED])
        if self._plan is not None:
            chunks = self._features(chunks, 'EmbedKept', self._plan[-1])
        if not dropped:
            dropped.append(chunks.pipeline | 'NoFilters' >> beam.Create([]))
        return {KEPT: chunks, DROPPED: tuple(dropped) | 'FlattenDropped' >> beam.Flatten()}
