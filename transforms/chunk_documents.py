"""The chunking stage: Document -> Chunk, with the model's tokenizer per worker."""

from __future__ import annotations

import time
from typing import Iterable

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.chunking import ChunkerConfig, TokenIndex, chunk_spans, token_offsets
from transforms.models import SharedModel
from transforms.semantic_chunking import semantic_spans
from transforms.text import content_hash
from transforms.types import Chunk, Document, make_chunk_id


def document_chunks(document: Document, spans, tokens: TokenIndex) -> list[Chunk]:
    """Builds the chunks of a document from its spans, in order."""
    chunks = []
    for index, (start, end) in enumerate(spans):
        text = document.text[start:end]
        chunks.append(
            Chunk(
                chunk_id=make_chunk_id(document.doc_id, index),
                doc_id=document.doc_id,
                chunk_index=index,
                text=text,
                char_start=start,
                char_end=end,
                n_tokens=tokens.count(start, end),
                content_hash=content_hash(text),
                metadata=document.metadata,
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

    def setup(self):
        # The embedding model's own tokenizer, so sizes match what it embeds.
        self._model = self._model_handle.acquire()

    def process(self, document: Document) -> Iterable[Chunk]:
        started = time.perf_counter()
        tokens = TokenIndex(token_offsets(self._model.tokenizer, document.text))
        if self._config.is_semantic:
            # Same model instance as EmbedChunks (shared per process), not a copy.
            spans = semantic_spans(
                self._config.name, document.text, tokens, self._model,
                self._config.chunk_size, self._batch_size,
            )
        else:
            spans = chunk_spans(document.text, tokens, self._config)
        chunks = document_chunks(document, spans, tokens)
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        self._documents.inc()
        self._chunks.inc(len(chunks))
        yield from chunks


class ChunkDocuments(beam.PTransform):
    """PCollection[Document] -> PCollection[Chunk] (no features yet).

    Semantic chunkers embed ~50-token pieces of each document with the shared
    model; those piece vectors are used for the cut points only and dropped,
    chunks are embedded afterwards on their final text by EmbedChunks.
    """

    def __init__(self, model: SharedModel, config: ChunkerConfig, batch_size: int = 64):
        super().__init__()
        self._model = model
        self._config = config
        self._batch_size = batch_size

    def expand(self, documents):
        return documents | 'Chunk' >> beam.ParDo(
            _ChunkDocumentFn(self._model, self._config, self._batch_size)
        )
