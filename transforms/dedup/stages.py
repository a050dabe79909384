"""The filtering stage: redundancy filters as Beam transforms, each splitting kept from dropped."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Callable, Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from transforms.dedup import registry
from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.scope import chunk_scope
from transforms.dedup.stage_parts import (
    DROPPED,
    KEPT,
    UNGROUPED,
    Counters,
    counter_namespace,
    split_outputs,
    step_label,
)
from transforms.features.compute import ComputeFeatures, dropped_with_features
from transforms.features.embedding import EmbeddingConfig, SharedModel
from transforms.types import FEATURES, Chunk

# --- group-wise filters: a pure function over a group of chunks -----------------------


def decide_group(chunks: Iterable[Chunk], spec: FilterSpec, config: FilterConfig):
    """A grouped filter's decision over one group, sorted first (not runner order)."""
    return registry.get(spec.name).decide(sorted(chunks, key=Chunk.sort_key), spec.threshold, config)


class ApplyFilterFn(beam.DoFn):
    """Applies `fn(chunks) -> (kept, dropped)` to each group; dropped go to a tagged output."""

    def __init__(self, index: int, name: str, fn: Callable):
        self._index = index
        self._name = name
        self._fn = fn

    def setup(self):
        self._counters = Counters(self._index, self._name)

    def process(self, chunks: Iterable[Chunk]):
        kept, dropped = self._fn(list(chunks))
        self._counters.count(len(kept), dropped)
        yield from split_outputs(kept, dropped)


class DropByKey(beam.PTransform):
    """A `GROUPED` filter. PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.

    A GroupByKey on `(scope, group_key(chunk))`; the filter's `decide` runs
    per group. A chunk whose group key is None is kept without grouping
    (counted as `kept_ungrouped`), so it cannot make a hot group.
    """

    def __init__(self, spec: FilterSpec, config: FilterConfig, index: int = 0):
        super().__init__()
        definition = registry.get(spec.name)
        if definition.strategy != registry.GROUPED:
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
        self._counters = Counters(self._index, self._name)
        self._ungrouped = Metrics.counter(counter_namespace(self._index, self._name), UNGROUPED)

    def process(self, chunk: Chunk):
        key = self._key_fn(chunk)
        if key is None:
            self._counters.count(1, [])
            self._ungrouped.inc()
            yield pvalue.TaggedOutput(KEPT, chunk)
        else:
            yield (chunk_scope(chunk, self._scope), key), chunk


# --- intra_doc -----------------------------------------------------------------------


# --- per chunk -------------------------------------------------------------------------


class PerChunkFn(beam.DoFn):
    def __init__(self, index: int, spec: FilterSpec, config: FilterConfig):
        self._index = index
        self._spec = spec
        self._config = config

    def setup(self):
        self._counters = Counters(self._index, self._spec.name)
        self._decide = registry.get(self._spec.name).decide

    def process(self, chunk: Chunk):
        kept, dropped = self._decide([chunk], self._spec.threshold, self._config)
        self._counters.count(len(kept), dropped)
        yield from split_outputs(kept, dropped)


class DropPerChunk(beam.PTransform):
    """A `PER_CHUNK` filter (e.g. `random`): each chunk decided alone.

    PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.
    """

    def __init__(self, spec: FilterSpec, config: FilterConfig, index: int = 0):
        super().__init__()
        if registry.get(spec.name).strategy != registry.PER_CHUNK:
            raise ValueError(f'{spec.name!r} is not a per-chunk filter')
        self._spec = spec
        self._config = config
        self._index = index

    def expand(self, chunks):
        outputs = chunks | 'DecideAndSplit' >> beam.ParDo(
            PerChunkFn(self._index, self._spec, self._config)).with_outputs(DROPPED, main=KEPT)
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


# --- the sequence ----------------------------------------------------------------------


def filter_transform(index: int, spec: FilterSpec, config: FilterConfig) -> beam.PTransform:
    """The transform of one filter, the `index`-th of the run.

    A family folder with a `stage` module gives its own; otherwise the
    registered strategy's generic stage runs the filter's pure decision.

    Raises:
      ValueError: For an unknown filter name, or a pair filter without a stage.
    """
    definition = registry.get(spec.name)
    own = family_stage(definition)
    if own is not None:
        return own(index, spec, config, definition)
    if definition.strategy == registry.PER_CHUNK:
        return DropPerChunk(spec, config, index)
    if definition.strategy == registry.GROUPED:
        return DropByKey(spec, config, index)
    raise ValueError(f'filter {spec.name!r}: strategy {definition.strategy!r} needs a stage module in its family')


def family_stage(definition: registry.FilterDef) -> Optional[Callable]:
    """The `stage` function of the filter's family folder, or None if it has none."""
    name = f'{definition.family}.stage'
    if importlib.util.find_spec(definition.family).submodule_search_locations is None:
        return None  # a single-module family
    if importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name).stage


def feature_plan(config: FilterConfig) -> list[tuple[str, ...]]:
    """What to compute before each filter, and after the last: each feature just before its first use.

    A chunk a filter drops is never given the features only later filters
    use, so cheap lexical filters placed first (`exact`, `minhash`) save the
    model their drops. The index needs every kept chunk embedded, so the
    entry after the last filter embeds them when no filter did.

    Returns:
      One tuple per filter, in run order (its `FilterDef.needs` not computed
      before it), then one for the kept chunks; each in `FEATURES` order
      (topics cluster the embeddings).
    """
    done: set[str] = set()
    plan = []
    for needs in [registry.get(name).needs for name in config.names] + [frozenset({'embedding'})]:
        new = tuple(f for f in FEATURES if f in needs and f not in done)
        done.update(new)
        plan.append(new)
    return plan


class FilterChunks(beam.PTransform):
    """Applies the configured filters in order, computing features lazily when given the model.

    PCollection[Chunk] -> {'kept': PCollection[Chunk], 'dropped':
    PCollection[Dropped]}; every input chunk is in exactly one of the two.

    With `model` and `embedding`, each feature is computed just before the
    first filter that needs it, on the chunks the filters before it kept
    (`feature_plan`), and the kept chunks are embedded at the end if
    no filter did it. A dropped chunk carries exactly the features the plan
    had given it by then, whatever the feature cache held: its dropped/ row
    says so, and a rebuild writes the same bytes as a fresh build. Without a
    model the chunks must carry the features the filters need.
    """

    def __init__(self, config: FilterConfig, model: Optional[SharedModel] = None,
                 embedding: Optional[EmbeddingConfig] = None):
        super().__init__()
        self._config = config
        self._model = model
        self._embedding = embedding
        self._plan = feature_plan(config) if model is not None else None

    def _features(self, chunks, label: str, needed: Sequence[str]):
        if not needed:
            return chunks
        return chunks | label >> ComputeFeatures(self._config.features, needed, self._model, self._embedding)

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
