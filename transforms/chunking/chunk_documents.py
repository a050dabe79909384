"""The chunking stage: Document -> Chunk, with the model's tokenizer per worker."""

from __future__ import annotations

import time
from typing import Callable, Iterable, Optional, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from transforms import progress
from transforms.chunking.chunkers import ChunkerConfig, TokenIndex, chunk_spans, token_offsets
from transforms.chunking.semantic import semantic_spans
from transforms.features import cache as feature_cache
from transforms.features.embedding import SharedModel
from transforms.ingest.layout import chunk_metadata
from transforms.text import content_hash, text_key
from transforms.types import Chunk, Document, make_chunk_id


def document_chunks(document: Document, spans, tokens: TokenIndex) -> list[Chunk]:
    """Builds the chunks of a document from its spans, in order."""
    return chunks_of_spans(document, [(start, end, tokens.count(start, end)) for start, end in spans])


def document_spans(
    document: Document,
    config: ChunkerConfig,
    model,
    batch_size: int = 64,
    tokens: Optional[TokenIndex] = None,
    embed: Optional[Callable[[list[str]], np.ndarray]] = None,
) -> list[tuple[int, int, int]]:
    """`(char_start, char_end, n_tokens)` of each chunk of a document: the chunking stage.

    The build's DoFn and the evaluation both chunk through this function.

    Args:
      document: The document.
      config: The chunker.
      model: A loaded sentence-transformers model: its tokenizer counts the
        tokens, and the semantic chunkers embed pieces with it.
      batch_size: Texts per forward pass (semantic chunkers).
      tokens: The document's token index, when the caller already has it
        (the evaluation reuses it across chunkers); computed otherwise.
      embed: For the semantic chunkers, embeds texts as `embed_texts` does
        (e.g. through a cache); see `semantic_spans`.
    """
    if tokens is None:
        tokens = TokenIndex(token_offsets(model.tokenizer, document.text))
    if config.is_semantic:
        own = {k: v for k, v in (('piece_size', config.param('piece')), ('window', config.param('window')))
               if v is not None}
        spans = semantic_spans(
            config.name, document.text, tokens, model, config.chunk_size, batch_size, embed=embed, **own)
    else:
        spans = chunk_spans(document.text, tokens, config)
    return [(start, end, tokens.count(start, end)) for start, end in spans]


def chunks_of_spans(document: Document, spans: Sequence[tuple[int, int, int]]) -> list[Chunk]:
    """Builds the chunks of a document from `(char_start, char_end, n_tokens)`, in order.

    Each chunk's metadata is its document's plus, for extracted formats, the
    pages and heading path of its own span (`transforms.layout`).
    """
    chunks = []
    for index, (start, end, n_tokens) in enumerate(spans):
        text = document.text[start:end]
        chunks.append(
            Chunk(
                chunk_id=make_chunk_id(document.doc_id, index),
                doc_id=document.doc_id,
                chunk_index=index,
                text=text,
                char_start=start,
                char_end=end,
                n_tokens=n_tokens,
                content_hash=content_hash(text),
                metadata=chunk_metadata(document.metadata, document.layout, start, end),
            )
        )
    return chunks


class _ChunkDocumentFn(beam.DoFn):
    def __init__(self, model: SharedModel, config: ChunkerConfig, batch_size: int):
        self._model_handle = model
        self._config = config
        self._batch_size = batch_size
        self._documents = Metrics.counter('chunk', 'documents')
        self._chunks = Metrics.counter('chunk', 'chunks')
        self._msecs = Metrics.counter('chunk', 'msecs')
        self._live = progress.Tally()

    def setup(self):
        # The embedding model's own tokenizer, so sizes match what it embeds.
        self._model = self._model_handle.acquire()

    def spans_of(self, document: Document) -> list[tuple[int, int, int]]:
        """`(char_start, char_end, n_tokens)` of each chunk of the document."""
        # Same model instance as EmbedChunks (shared per process), not a copy.
        return document_spans(document, self._config, self._model, self._batch_size)

    def chunks(self, document: Document, spans) -> list[Chunk]:
        chunks = chunks_of_spans(document, spans)
        self._documents.inc()
        self._chunks.inc(len(chunks))
        self._live.count(progress.CHUNKS, len(chunks))
        return chunks

    def finish_bundle(self):
        self._live.flush()

    def process(self, document: Document) -> Iterable[Chunk]:
        started = time.perf_counter()
        chunks = self.chunks(document, self.spans_of(document))
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        yield from chunks


class _ChunkWithCachedSpansFn(_ChunkDocumentFn):
    """Chunks documents joined with the spans cache; also emits every document's spans.

    Input: `(text_key, {'documents': [...], 'spans': [cached value or none]})`.
    Outputs: chunks, and `(text_key, spans)` on the 'spans' output.
    """

    def __init__(self, model: SharedModel, config: ChunkerConfig, batch_size: int):
        super().__init__(model, config, batch_size)
        self._hits = Metrics.counter('cache', 'spans_hits')
        self._misses = Metrics.counter('cache', 'spans_misses')

    def process(self, element) -> Iterable:
        key, groups = element
        cached = next(iter(groups[feature_cache.SPANS]), None)
        spans = None if cached is None else feature_cache.typed_value(feature_cache.SPANS, cached)
        for document in groups['documents']:
            started = time.perf_counter()
            if spans is None:
                self._misses.inc()
                spans = self.spans_of(document)
            else:
                self._hits.inc()
            chunks = self.chunks(document, spans)
            self._msecs.inc(int((time.perf_counter() - started) * 1000))
            yield beam.pvalue.TaggedOutput(feature_cache.SPANS, (key, spans))
            yield from chunks


def _keyed_document(document: Document) -> tuple[str, Document]:
    return text_key(document.text), document


class ChunkDocuments(beam.PTransform):
    """PCollection[Document] -> PCollection[Chunk] (no features yet).

    Semantic chunkers embed ~50-token pieces of each document with the shared
    model; those piece vectors are used for the cut points only and dropped,
    chunks are embedded afterwards on their final text by EmbedChunks.

    With a cache that holds spans, documents are joined with it by text key
    (CoGroupByKey): an unchanged document is neither tokenized nor, for the
    semantic chunkers, embedded again; this run's spans are written as the
    cache's next generation.
    """

    def __init__(
        self, model: SharedModel, config: ChunkerConfig, batch_size: int = 64,
        cache: Optional[feature_cache.CacheRun] = None,
    ):
        super().__init__()
        self._model = model
        self._config = config
        self._batch_size = batch_size
        self._cache = cache

    def expand(self, documents):
        if self._cache is None or feature_cache.SPANS not in self._cache.features():
            return documents | 'Chunk' >> beam.ParDo(
                _ChunkDocumentFn(self._model, self._config, self._batch_size)
            )
        joined = {
            'documents': documents | 'KeyByText' >> beam.Map(_keyed_document),
            feature_cache.SPANS: documents.pipeline
            | 'SpansCache' >> feature_cache.ReadCacheEntries(self._cache, feature_cache.SPANS),
        } | 'JoinOnTextKey' >> beam.CoGroupByKey()
        out = joined | 'Chunk' >> beam.ParDo(
            _ChunkWithCachedSpansFn(self._model, self._config, self._batch_size)
        ).with_outputs(feature_cache.SPANS, main='chunks')
        _ = out[feature_cache.SPANS] | 'WriteSpansCache' >> feature_cache.WriteCacheEntries(
            self._cache, feature_cache.SPANS)
        return out['chunks']
