"""Intra-doc in the build: one group per document (and scope)."""

from __future__ import annotations

from typing import Iterable

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from transforms.dedup import registry
from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.filters.intra_doc.decision import intra_doc, salience
from transforms.dedup.stage_parts import DROPPED, KEPT, LOG, Counters, counter_namespace, keyed_by, split_outputs
from transforms.types import Chunk, Dropped


def intra_doc_group(
    chunks: Iterable[Chunk], spec: FilterSpec, config: FilterConfig
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
    def __init__(self, index: int, spec: FilterSpec, config: FilterConfig):
        self._index = index
        self._spec = spec
        self._config = config

    def setup(self):
        self._counters = Counters(self._index, 'intra_doc')
        self._lifted = Metrics.counter(counter_namespace(self._index, 'intra_doc'), 'salience_warnings')

    def process(self, chunks: Iterable[Chunk]):
        kept, dropped, lifted = intra_doc_group(chunks, self._spec, self._config)
        for chunk_id, before, after in lifted:
            LOG.warning('intra_doc boost lifted the salience of %s from %.3f to %.3f (above %.2f)',
                        chunk_id, before, after, self._config.warn_salience)
        self._lifted.inc(len(lifted))
        self._counters.count(len(kept), dropped)
        yield from split_outputs(kept, dropped)


class DropIntraDocRedundancy(beam.PTransform):
    """klarRAG ingestion dedup per document; sets (and boosts) `salience` on kept chunks.

    PCollection[Chunk] (embedded) -> {'kept': PCollection[Chunk], 'dropped': PCollection[Dropped]}.
    A GroupByKey on `(scope, doc_id)`, then `filters.intra_doc.intra_doc` per document
    (a document has one scope; the key carries it so every filter keys alike).
    """

    def __init__(self, spec: FilterSpec, config: FilterConfig, index: int = 0):
        super().__init__()
        self._spec = spec
        self._config = config
        self._index = index

    def expand(self, chunks):
        outputs = (
            chunks
            | 'KeyByDocument' >> beam.Map(keyed_by, registry.get('intra_doc').group_key, self._config.scope)
            | 'GroupByDocument' >> beam.GroupByKey()
            | 'DocumentGroups' >> beam.Values()
            | 'DedupWithinDocument' >> beam.ParDo(IntraDocFn(self._index, self._spec, self._config))
            .with_outputs(DROPPED, main=KEPT)
        )
        return {KEPT: outputs[KEPT], DROPPED: outputs[DROPPED]}


def stage(index: int, spec: FilterSpec, config: FilterConfig, definition) -> beam.PTransform:
    """The `index`-th filter of the run as a Beam stage (`stages.filter_transform` calls it).

    Its own stage rather than the grouped one: it also warns about (and
    counts) boosts that lift a salience.
    """
    return DropIntraDocRedundancy(spec, config, index)
