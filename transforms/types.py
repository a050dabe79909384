"""Element schemas shared by every stage of the ragsieve pipelines."""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the pages and headings of an extracted document are in its text.

    Attributes:
      pages: `(start, end)` offsets of each page's text, page 1 first; None
        when the format has no pages.
      headings: `(offset, level, text)` of each heading line, in text order;
        None when the format has no headings.
    """
    pages: Optional[tuple[tuple[int, int], ...]] = None
    headings: Optional[tuple[tuple[int, int, str], ...]] = None


@dataclasses.dataclass(frozen=True)
class Document:
    """One input document.

    Attributes:
      doc_id: Unique id: path relative to the input root, or the record's `id`.
      text: The full text; chunk offsets index into it.
      path: The file it came from.
      position: Line (`.jsonl`) or row (`.parquet`) number from 1; 0 for a whole file.
      metadata: The record's metadata as a JSON string, or None.
      layout: Pages and headings of a document extracted from HTML, PDF or DOCX.
      source_bytes: Size of the raw file a whole-file document was read from.
      source_hash: blake2b of that raw file, so a changed file with the same
        text is told apart from an unchanged one.
    """
    doc_id: str
    text: str
    path: str
    position: int = 0
    metadata: Optional[str] = None
    layout: Optional[Layout] = None
    source_bytes: Optional[int] = None
    source_hash: Optional[str] = None

    @property
    def source(self) -> str:
        """Where the document came from, for error messages and rejected rows."""
        return f'{self.path}:{self.position}' if self.position else self.path


@dataclasses.dataclass(frozen=True)
class Rejected:
    """An input record that cannot be used, with the reason why.

    Attributes:
        source: File (and line or row) of the record.
        doc_id: The record's id when it had one.
        reason: Short machine-readable code, e.g. `not_utf8`, `empty_text`.
        detail: Human-readable explanation.
    """
    source: str
    doc_id: Optional[str]
    reason: str
    detail: str = ''


# Per-chunk features, in the order they are computed when one filter needs
# several (topics cluster the embeddings), and the Chunk field of each.
FEATURES = ('embedding', 'minhash', 'entities', 'topics')
FEATURE_FIELDS = {'embedding': 'embedding', 'minhash': 'minhash', 'entities': 'entities', 'topics': 'topic'}


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A span of a document, with the features computed for it so far.

    `text == document.text[char_start:char_end]` always holds. Feature fields
    stay None until the stage that computes them has run.

    Attributes:
        chunk_id: `{doc_id}#{chunk_index}`, stable across runs.
        doc_id: Id of the source document.
        chunk_index: Position of the chunk within its document, from 0.
        text: The chunk's text.
        char_start: Start offset into the document text (inclusive).
        char_end: End offset into the document text (exclusive).
        n_tokens: Tokens of the embedding model's tokenizer, without special tokens.
        content_hash: Hash of the normalized text (see `text.content_hash`).
        metadata: The document's metadata as a JSON string, or None.
        embedding: Normalized float32 vector, once embedded.
      entities: Normalized entities as `label:text` strings, sorted, once extracted.
      minhash: MinHash signature (uint64 hash values), once computed.
      topic: Cluster id of the embedding, for the `*_topics` filters.
      salience: Centrality in [0, 1] within its document, for `intra_doc`.
      kind: `chunk` for a span cut by the chunker, `delta` for the novel
        sentences of a chunk dropped as a near-duplicate (`lineage.deltas`).
      delta_of: For a delta, the kept chunk that represents the dropped chunk
        it comes from; None otherwise.
      represents: For a kept chunk, the chunks dropped as its duplicates
        (transitively through the filters), as sorted `(chunk_id, doc_id)`.
    """
    chunk_id: str
    doc_id: str
    chunk_index: int
    text: str
    char_start: int
    char_end: int
    n_tokens: int
    content_hash: str
    metadata: Optional[str] = None
    embedding: Optional[np.ndarray] = None
    entities: Optional[tuple[str, ...]] = None
    minhash: Optional[np.ndarray] = None
    topic: Optional[int] = None
    salience: Optional[float] = None
    kind: str = 'chunk'
    delta_of: Optional[str] = None
    represents: tuple[tuple[str, str], ...] = ()

    def sort_key(self) -> tuple[str, int, str]:
        """Canonical output order: by document, then position (a delta after its chunk's position)."""
        return (self.doc_id, self.chunk_index, self.chunk_id)

    def features(self) -> list[str]:
        """The names of the features the chunk carries, in `FEATURES` order."""
        return [f for f in FEATURES if getattr(self, FEATURE_FIELDS[f]) is not None]


@dataclasses.dataclass(frozen=True)
class Dropped:
    """A chunk removed by a filter, with the evidence for the decision.

    Attributes:
      chunk: The removed chunk.
      reason: Name of the filter that removed it.
      duplicate_of: chunk_id of the kept chunk it duplicates (None for `random`).
      score: Cosine similarity or estimated Jaccard behind the decision.
    """
    chunk: Chunk
    reason: str
    duplicate_of: Optional[str] = None
    score: Optional[float] = None


CHUNK = 'chunk'
DELTA = 'delta'


def make_chunk_id(doc_id: str, chunk_index: int) -> str:
    """Returns the stable id of a document's `chunk_index`-th chunk."""
    return f'{doc_id}#{chunk_index}'
