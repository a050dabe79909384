"""Per-chunk features for the filters (embeddings, MinHash signatures, entities, topics), computed lazily."""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable, Iterable, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from transforms.features import topics
from transforms.features.config import FeatureConfig
from transforms.features.embedding import EmbedChunks, EmbeddingConfig, SharedModel
from transforms.features.entities import extract_entities, load_ner
from transforms.features.minhash import MinHashConfig, signatures
from transforms.types import FEATURE_FIELDS, FEATURES, Chunk, Dropped

# Texts per batch handed to a feature DoFn; the libraries batch further inside.
FEATURE_BATCH = 256

EMBEDDING, MINHASH, ENTITIES, TOPICS = FEATURES


def dropped_with_features(dropped: Dropped, given: Sequence[str]) -> Dropped:
    """The dropped chunk with only the features in `given`: those a cold build had computed.

    A chunk may carry more, read from the feature cache; without them its
    dropped/ row (and the cache's next generation) is the same in every run.
    """
    fields = {FEATURE_FIELDS[f]: None for f in FEATURES if f not in given}
    return dataclasses.replace(dropped, chunk=dataclasses.replace(dropped.chunk, **fields))


class SharedNer:
    """A handle that gives every DoFn of a worker process the same spaCy pipeline.

    Pickles with the DoFns that hold it; the pipeline is loaded once per
    process on first `acquire` (Beam's `Shared`, as `embedding.SharedModel`).
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
    """Returns the chunks in canonical order with `topic` set (`topics.topics`, in memory).

    The chunks are sorted by `(doc_id, chunk_index)` first: KMeans depends on
    the row order, which must not be the runner's.
    """
    ordered = sorted(chunks, key=Chunk.sort_key)
    if not ordered:
        return []
    ids = topics.topics(np.stack([c.embedding for c in ordered]), n_topics, seed, [c.chunk_id for c in ordered])
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


def sample_entry(chunk: Chunk) -> tuple:
    """`(sample rank, canonical key, embedding)`: the smallest ranks form the training sample."""
    return topics.sample_rank(chunk.chunk_id), chunk.sort_key(), chunk.embedding


def train_on_entries(entries: Iterable[tuple], n_total: int, train: Callable):
    """`train(sample embeddings in canonical order, n_total)`; None for no chunk.

    Canonical order because KMeans depends on the row order, which must not be the runner's.
    """
    ordered = sorted(entries, key=lambda e: e[1])
    if not ordered:
        return None
    return train(np.stack([e[2] for e in ordered]), n_total)


class TrainOnSample(beam.PTransform):
    """PCollection[Chunk] (embedded) -> a one-element PCollection: a model trained on a bounded sample.

    The sample is the `size` chunks with the smallest `topics.sample_rank`
    (a stable hash of chunk_id, so the same on every runner): the only
    thing gathered, and it stays small whatever the corpus. `train` gets the
    sample's embeddings in canonical order and the corpus's chunk count
    (e.g. for the number of clusters); its model (a few centroids) is meant
    to reach the workers as a side input.
    """

    def __init__(self, size: int, train: Callable):
        super().__init__()
        self._size = size
        self._train = train

    def expand(self, chunks):
        count = chunks | 'CountChunks' >> beam.combiners.Count.Globally()
        return (
            chunks
            | 'SampleEntries' >> beam.Map(sample_entry)
            | 'Sample' >> beam.combiners.Top.Smallest(self._size)
            | 'Train' >> beam.Map(train_on_entries, beam.pvalue.AsSingleton(count), self._train)  # small: one count
        )


class _AssignTopicsFn(beam.DoFn):
    def process(self, batch: list[Chunk], model) -> Iterable[Chunk]:
        ids = topics.assign_topics(model, np.stack([c.embedding for c in batch]))
        for chunk, topic in zip(batch, ids):
            yield dataclasses.replace(chunk, topic=int(topic))


class AssignTopics(beam.PTransform):
    """PCollection[Chunk] (embedded) -> PCollection[Chunk] with `topic` set.

    KMeans is trained on a bounded sample (`topics.TOPIC_SAMPLE` chunks, the
    smallest `sample_rank`: the only gathered thing, and it stays small
    whatever the corpus), with the chunk count for the default number of
    topics; the fitted model (k centroids) reaches the workers as a side
    input and each batch of chunks is assigned there. A corpus no larger than
    the sample gets exactly `topics.topics`' (and the evaluation's) result.
    """

    def __init__(self, n_topics: Optional[int], seed: int):
        super().__init__()
        self._n_topics = n_topics
        self._seed = seed

    def expand(self, chunks):
        train = functools.partial(topics.train_topics, n_topics=self._n_topics, seed=self._seed)
        model = chunks | 'TrainKMeans' >> TrainOnSample(topics.TOPIC_SAMPLE, train)
        return (
            chunks
            | 'BatchForTopics' >> beam.BatchElements(min_batch_size=1, max_batch_size=FEATURE_BATCH)
            | 'Assign' >> beam.ParDo(_AssignTopicsFn(), beam.pvalue.AsSingleton(model))  # small: centroids of a bounded sample
        )


class ComputeFeatures(beam.PTransform):
    """PCollection[Chunk] -> PCollection[Chunk] with the given features set.

    Features a chunk already carries (from the feature cache) are kept, not
    computed again. The build computes each feature just before the first
    filter that needs it (`dedup.stages.feature_plan`).
    """

    def __init__(
        self, config: FeatureConfig, features: Sequence[str],
        model: Optional[SharedModel] = None, embedding: Optional[EmbeddingConfig] = None,
    ):
        super().__init__()
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise ValueError(f'unknown features {sorted(unknown)}; expected some of {FEATURES}')
        if EMBEDDING in features and (model is None or embedding is None):
            raise ValueError('computing embeddings needs the model and the embedding settings')
        self._config = config
        self._features = tuple(features)
        self._model = model
        self._embedding = embedding

    def expand(self, chunks):
        config = self._config
        for feature in self._features:
            if feature == EMBEDDING:
                chunks = chunks | 'EmbedChunks' >> EmbedChunks(self._model, self._embedding)
            elif feature == MINHASH:
                # The filter's threshold only bands signatures; they do not depend on it.
                chunks = chunks | 'ComputeMinhash' >> ComputeMinhash(config.minhash_config())
            elif feature == ENTITIES:
                chunks = chunks | 'ExtractEntities' >> ExtractEntities(
                    SharedNer(config.spacy_model), config.entity_labels, config.entity_batch_size)
            else:
                chunks = chunks | 'AssignTopics' >> AssignTopics(config.n_topics, config.topic_seed)
        return chunks
