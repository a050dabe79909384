"""The build's stages run in process for the evaluation grid, with the build's feature cache.

Chunking, embedding and the filter features are the build's own stage
functions (`document_spans`, `embed_texts`, `extract_entities`,
`compute.with_minhash`, `compute.with_topics`); this module only decides
what to compute once per run and what to read from / write to the feature
cache (`features.cache`: same keys, same settings ids, same
generations as a build's cache).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from transforms.chunking.chunk_documents import chunks_of_spans, document_spans
from transforms.chunking.chunkers import ChunkerConfig, TokenIndex, token_offsets
from transforms.dedup import registry
from transforms.features import cache as feature_cache
from transforms.features import compute
from transforms.features.cache_settings import cache_specs
from transforms.features.config import FeatureConfig
from transforms.features.embedding import EmbeddingConfig, embed_texts
from transforms.features.entities import extract_entities, load_ner
from transforms.output import snapshots
from transforms.text import text_key
from transforms.types import Chunk, Document

# Default bound of what a run keeps in the cache beyond its own entries (see FeatureStore.save).
DEFAULT_CACHE_MAX_BYTES = 1 << 30
# The cached features an evaluation computes per text (spans are re-cut: they are cheap and
# the grid's chunkers differ from run to run).
CACHED = ('embedding', 'entities')


def entry_bytes(key: str, value) -> int:
    """Approximate size of a cache entry: its key and its value's payload."""
    if isinstance(value, np.ndarray):
        return len(key) + value.nbytes
    return len(key) + sum(len(v) for v in value)


class FeatureStore:
    """Models and per-text features shared by every chunker of a run.

    Chunk texts repeat across chunkers (every other window of fixed 400/200
    is a window of fixed 400/0), and embeddings and entities depend on the
    text only (`embed_texts` pads by length bucket, so a vector does not
    depend on its batch), so both are kept by text key. With a feature
    cache they also carry over between runs, semantic chunkers' piece
    embeddings included; `save` bounds what is carried over.
    """

    def __init__(
        self, model, batch_size: int, settings: FeatureConfig,
        cache: Optional[feature_cache.CacheRun] = None,
    ):
        self.model = model
        self.batch_size = batch_size
        self.settings = settings
        self.cache = cache
        self._ner = None
        self._values: dict[str, dict] = {f: {} for f in CACHED}
        self._used: dict[str, set] = {f: set() for f in CACHED}
        self._tokens: dict[str, TokenIndex] = {}
        self.computed = {f: 0 for f in CACHED}
        for spec in cache.specs if cache else ():
            if cache.read_from[spec.feature]:
                self._values[spec.feature] = feature_cache.read_entries(cache.read_from[spec.feature], spec.feature)
        self.loaded = {f: len(v) for f, v in self._values.items()}

    def tokens(self, document: Document) -> TokenIndex:
        """The document's model-token index, computed once per run and text.

        Keyed by the text, not the doc_id: two datasets scored with one store
        may both have a passage `p0`.
        """
        key = text_key(document.text)
        if key not in self._tokens:
            self._tokens[key] = TokenIndex(token_offsets(self.model.tokenizer, document.text))
        return self._tokens[key]

    def _todo(self, feature: str, texts: Sequence[str]) -> tuple[list[str], list[str]]:
        keys = [text_key(t) for t in texts]
        self._used[feature].update(keys)
        known = self._values[feature]
        todo = sorted({t for t, k in zip(texts, keys) if k not in known})
        self.computed[feature] += len(todo)
        return keys, todo

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """`(len(texts), dim)` normalized float32 embeddings; each distinct text embedded once."""
        keys, todo = self._todo('embedding', texts)
        vectors = self._values['embedding']
        for text, vector in zip(todo, embed_texts(self.model, todo, self.batch_size)):
            vectors[text_key(text)] = vector
        dim = self.model.get_embedding_dimension()
        return np.stack([vectors[k] for k in keys]) if keys else np.zeros((0, dim), np.float32)

    def entities(self, texts: Sequence[str]) -> list[tuple[str, ...]]:
        """The entities of each text (see `extract_entities`); NER is loaded on first use."""
        keys, todo = self._todo('entities', texts)
        found = self._values['entities']
        if todo:
            if self._ner is None:
                self._ner = load_ner(self.settings.spacy_model)
            computed = extract_entities(
                self._ner, todo, self.settings.entity_labels, self.settings.entity_batch_size)
            found.update(zip(map(text_key, todo), computed))
        return [found[k] for k in keys]

    def kept_entries(self, feature: str, max_bytes: int) -> list[tuple[str, object]]:
        """The entries `save` writes: every one this run used, then earlier runs' while under `max_bytes`.

        Earlier runs' entries are taken in key order (a stable choice) until
        the generation's estimated size (`entry_bytes`) would pass
        `max_bytes`; this run's own are kept whatever their size, as a
        build keeps its corpus' entries.
        """
        values, used = self._values[feature], self._used[feature]
        kept = [(k, values[k]) for k in sorted(used)]
        size = sum(entry_bytes(k, v) for k, v in kept)
        for key in sorted(values.keys() - used):
            size += entry_bytes(key, values[key])
            if size > max_bytes:
                break
            kept.append((key, values[key]))
        return kept

    def save(self, max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        """Writes the cache's next generation (see `kept_entries`); older generations are deleted."""
        if not self.cache:
            return
        for spec in self.cache.specs:
            self.cache.write_entries(spec.feature, self.kept_entries(spec.feature, max_bytes))
        self.cache.commit()
        self.cache.prune()


def open_cache(root: Optional[str], embedding: EmbeddingConfig, model, settings: FeatureConfig,
               filter_names: set[str]) -> Optional[feature_cache.CacheRun]:
    """The feature cache of a run: embeddings always, entities when a filter needs them.

    The specs (and so the settings ids) are the build's (`cache_specs`): a
    build and an evaluation with the same models share entries.
    """
    if not root:
        return None
    cached = ['embedding'] + (['entities'] if filter_names & registry.needing('entities') else [])
    return feature_cache.CacheRun.open(root, cache_specs(cached, embedding, model, settings), snapshots.new_run_id())


def chunk_corpus(documents: Sequence[Document], chunker: ChunkerConfig, store: FeatureStore) -> list[Chunk]:
    """Chunks every document with the build's `document_spans`; canonical `(doc_id, chunk_index)` order."""
    chunks = []
    for document in documents:
        spans = document_spans(document, chunker, store.model, store.batch_size,
                               tokens=store.tokens(document), embed=store.embed)
        chunks.extend(chunks_of_spans(document, spans))
    return sorted(chunks, key=Chunk.sort_key)


def with_features(chunks: Sequence[Chunk], names: set[str], store: FeatureStore) -> list[Chunk]:
    """The chunks (canonical order) with their embedding and the features the filters `names` need.

    MinHash and topics come from the functions the build's feature DoFns
    call; embeddings and entities through the store's cache.
    """
    settings = store.settings
    vectors = store.embed([c.text for c in chunks])
    out = [dataclasses.replace(c, embedding=v) for c, v in zip(chunks, vectors)]
    if names & registry.needing('minhash'):
        out = compute.with_minhash(out, settings.minhash_config())
    if names & registry.needing('entities'):
        out = [dataclasses.replace(c, entities=e) for c, e in zip(out, store.entities([c.text for c in out]))]
    if names & registry.needing('topics'):
        out = compute.with_topics(out, settings.n_topics, settings.topic_seed)
    return out
