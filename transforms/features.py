"""Per-chunk features for the filters: MinHash signatures, named entities, topics."""

from __future__ import annotations

import dataclasses
import time
from typing import Iterable, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from transforms.dedup import FilterConfig, topics
from transforms.entities import extract_entities, load_ner
from transforms.minhash import MinHashConfig, signatures
from transforms.types import Chunk

# Texts per batch handed to a feature DoFn; the libraries batch further inside.
FEATURE_BATCH = 256


class SharedNer:
    """A handle that gives every DoFn of a worker process the same spaCy pipeline.

    Pickles with the DoFns that hold it; the pipeline is loaded once per
    process on first `acquire` (Beam's `Shared`, as `models.SharedModel`).
    """

    def __init__(self, model_name: str):
        from apache_beam.utils.shared import Shared

        self.model_name = model_name
        self._shared = Shared()

    def acquire(self):
        return self._shared.acquire(self._load, tag=('ner', self.model_name))

    def _load(self):
        return load_ner(self.model_name)


def with_minhash(chunks: Sequence[Chunk], config: MinHashConfig) -> list[Chunk]:
    """Returns the chunks with `minhash` set, computed in one batched call."""
    sigs = signatures([c.text for c in chunks], config)
    return [dataclasses.replace(c, minhash=s) for c, s in zip(chunks, sigs)]


def with_topics(chunks: Sequence[Chunk], n_topics: Optional[int], seed: int) -> list[Chunk]:
    """Returns the chunks in canonical order with `topic` set by seeded KMeans.

    The chunks are sorted by `(doc_id, chunk_index)` first: KMeans depends on
    the row order, which must not be the runner's.
    """
    ordered = sorted(chunks, key=Chunk.sort_key)
    if not ordered:
        return []
    ids = topics(np.stack([c.embedding for c in ordered]), n_topics, seed)
    return [dataclasses.replace(c, topic=int(t)) for c, t in zip(ordered, ids)]


class _MinhashBatchFn(beam.DoFn):
    def __init__(self, config: MinHashConfig):
        self._config = config
        self._chunks = Metrics.counter('features', 'minhash_chunks')
        self._msecs = Metrics.counter('features', 'minhash_msecs')

    def process(self, batch: list[Chunk]) -> Iterable[Chunk]:
        started = time.perf_counter()
        computed = iter(with_minhash([c for c in batch if c.minhash is None], self._config))
        out = [c if c.minhash is not None else next(computed) for c in batch]
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        self._chunks.inc(sum(c.minhash is None for c in batch))
        yield from out


class ComputeMinhash(beam.PTransform):
    """PCollection[Chunk] -> PCollection[Chunk] with `minhash` set (kept where already set)."""

    def __init__(self, config: MinHashConfig):
        super().__init__()
        self._config = config

    def expand(self, chunks):
        return (
            chunks
            | 'BatchForMinhash' >> beam.BatchElements(min_batch_size=1, max_batch_size=FEATURE_BATCH)
            | 'Signatures' >> beam.ParDo(_MinhashBatchFn(self._config))
        )


class _EntitiesBatchFn(beam.DoFn):
    def __init__(self, ner: SharedNer, labels: Optional[Sequence[str]], batch_size: int):
        self._ner_handle = ner
        self._labels = None if labels is None else tuple(labels)
        self._batch_size = batch_size
        self._chunks = Metrics.counter('features', 'entity_chunks')
        self._msecs = Metrics.counter('features', 'entity_msecs')

    def setup(self):
        self._nlp = self._ner_handle.acquire()

    def process(self, batch: list[Chunk]) -> Iterable[Chunk]:
        started = time.perf_counter()
        todo = [c for c in batch if c.entities is None]
        found = iter(extract_entities(self._nlp, [c.text for c in todo], self._labels, self._batch_size))
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        self._chunks.inc(len(todo))
        for chunk in batch:
            yield chunk if chunk.entities is not None else dataclasses.replace(chunk, entities=next(found))


class ExtractEntities(beam.PTransform):
    """PCollection[Chunk] -> PCollection[Chunk] with `entities` set (spaCy NER only; kept where set)."""

    def __init__(self, ner: SharedNer, labels: Optional[Sequence[str]], batch_size: int = 64):
        super().__init__()
        self._ner = ner
        self._labels = labels
        self._batch_size = batch_size

    def expand(self, chunks):
        return (
            chunks
            | 'BatchForNer' >> beam.BatchElements(min_batch_size=1, max_batch_size=FEATURE_BATCH)
            | 'Entities' >> beam.ParDo(_EntitiesBatchFn(self._ner, self._labels, self._batch_size))
        )


class AssignTopics(beam.PTransform):
    """PCollection[Chunk] (embedded) -> PCollection[Chunk] with `topic` set.

    KMeans needs every embedding at once, so the chunks are gathered on one
    worker (384 float32 per chunk: ~1.5 GB for a million chunks).
    """

    def __init__(self, n_topics: Optional[int], seed: int):
        super().__init__()
        self._n_topics = n_topics
        self._seed = seed

    def expand(self, chunks):
        return (
            chunks
            | 'GatherForTopics' >> beam.combiners.ToList()
            | 'KMeans' >> beam.FlatMap(with_topics, self._n_topics, self._seed)
        )


class ComputeFeatures(beam.PTransform):
    """PCollection[Chunk] -> PCollection[Chunk] with the features the filters need.

    Only what a selected filter uses is computed: `minhash` for `minhash`,
    `entities` for the `*ner*` filters, `topic` for the `*_topics` ones.
    """

    def __init__(self, config: FilterConfig):
        super().__init__()
        self._config = config

    def expand(self, chunks):
        config = self._config
        if config.needs_minhash:
            threshold = next(s.threshold for s in config.specs if s.name == 'minhash')
            chunks = chunks | 'ComputeMinhash' >> ComputeMinhash(config.minhash_config(threshold))
        if config.needs_entities:
            chunks = chunks | 'ExtractEntities' >> ExtractEntities(
                SharedNer(config.spacy_model), config.entity_labels, config.entity_batch_size)
        if config.needs_topics:
            chunks = chunks | 'AssignTopics' >> AssignTopics(config.n_topics, config.topic_seed)
        return chunks
