"""Writing the output contract: Parquet tables and the FAISS index, sorted and byte-stable."""

from __future__ import annotations

import io
import json
import posixpath
from typing import Iterable, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from transforms.text import text_key
from transforms.types import Chunk, Document, Dropped, Rejected

CHUNKS_DIR = 'chunks'
# One row per indexed document, so a later build can tell what changed.
DOCUMENTS_DIR = 'documents'
REJECTED_DIR = 'rejected'
DROPPED_DIR = 'dropped'
INDEX_DIR = 'index'
INDEX_FILE = 'index.faiss'
IDS_FILE = 'ids.parquet'
# BM25 over the kept chunk texts (bm25s files), row i = chunks row i; absent when no chunk is kept.
BM25_DIR = 'bm25'
MANIFEST_FILE = 'manifest.json'
# Test seam: a build whose environment names one of its checkpoints kills
# itself there with SIGKILL, exactly like `kill -9` at that point.
KILL_AT_ENV = 'RAGSIEVE_KILL_AT'
# One part per table for now: the FAISS index needs every vector in one place anyway.
PART_NAME = 'part-00000-of-00001.parquet'

CHUNK_SCHEMA = pa.schema(
    [
        ('chunk_id', pa.string()),
        ('doc_id', pa.string()),
        ('chunk_index', pa.int32()),
        ('text', pa.string()),
        ('char_start', pa.int64()),
        ('char_end', pa.int64()),
        ('n_tokens', pa.int32()),
        ('content_hash', pa.string()),
        ('embedding', pa.list_(pa.float32())),
        ('metadata', pa.string()),
        # Filter features; null where the filter that computes them did not run.
        ('entities', pa.list_(pa.string())),
        ('topic', pa.int32()),
        ('salience', pa.float32()),
        # 'chunk', or 'delta': novel sentences of a near-duplicate (transforms/deltas.py).
        ('kind', pa.string()),
        # For a delta, the kept chunk representing the chunk it comes from.
        ('delta_of', pa.string()),
        # The chunks dropped as this chunk's duplicates, through every filter (transforms/lineage.py).
        ('represents', pa.list_(pa.struct([('chunk_id', pa.string()), ('doc_id', pa.string())]))),
    ]
)
REJECTED_SCHEMA = pa.schema(
    [('source', pa.string()), ('doc_id', pa.string()), ('reason', pa.string()), ('detail', pa.string())]
)
DROPPED_SCHEMA = pa.schema(
    [
        ('chunk_id', pa.string()),
        ('doc_id', pa.string()),
        ('text', pa.string()),
        ('char_start', pa.int64()),
        ('char_end', pa.int64()),
        ('reason', pa.string()),
        ('duplicate_of', pa.string()),
        ('score', pa.float32()),
    ]
)
IDS_SCHEMA = pa.schema([('chunk_id', pa.string())])
DOCUMENT_SCHEMA = pa.schema(
    [
        ('doc_id', pa.string()), ('source', pa.string()), ('chars', pa.int64()), ('text_key', pa.string()),
        # The text chunk offsets index into (extracted, for HTML/PDF/DOCX), and the raw
        # file it came from: size and blake2b (null for .jsonl/.parquet records).
        ('text', pa.string()), ('source_bytes', pa.int64()), ('source_hash', pa.string()),
        # The document's metadata JSON: query-time filters match represented documents through it.
        ('metadata', pa.string()),
    ]
)


def sorted_chunks(chunks: Iterable[Chunk]) -> list[Chunk]:
    """Canonical order of every output: by doc_id, then chunk_index."""
    return sorted(chunks, key=Chunk.sort_key)


def chunks_table(chunks: list[Chunk]) -> pa.Table:
    """Chunks as a table in CHUNK_SCHEMA; the caller decides the order."""
    columns = {name: [] for name in CHUNK_SCHEMA.names}
    for c in chunks:
        for name in CHUNK_SCHEMA.names:
            columns[name].append(getattr(c, name))
    columns['embedding'] = [None if v is None else np.asarray(v, np.float32) for v in columns['embedding']]
    columns['entities'] = [None if v is None else list(v) for v in columns['entities']]
    columns['represents'] = [[{'chunk_id': c, 'doc_id': d} for c, d in v] for v in columns['represents']]
    return pa.table(columns, schema=CHUNK_SCHEMA)


def rejected_table(rejected: Iterable[Rejected]) -> pa.Table:
    """Rejected records sorted by (source, reason), in REJECTED_SCHEMA."""
    rows = sorted(rejected, key=lambda r: (r.source, r.reason, r.doc_id or ''))
    return pa.Table.from_pylist(
        [{'source': r.source, 'doc_id': r.doc_id, 'reason': r.reason, 'detail': r.detail} for r in rows],
        schema=REJECTED_SCHEMA,
    )


def dropped_table(dropped: Iterable[Dropped]) -> pa.Table:
    """Dropped chunks sorted like chunks, in DROPPED_SCHEMA."""
    rows = sorted(dropped, key=lambda d: d.chunk.sort_key())
    return pa.Table.from_pylist(
        [
            {
                'chunk_id': d.chunk.chunk_id,
                'doc_id': d.chunk.doc_id,
                'text': d.chunk.text,
                'char_start': d.chunk.char_start,
                'char_end': d.chunk.char_end,
                'reason': d.reason,
                'duplicate_of': d.duplicate_of,
                'score': d.score,
            }
            for d in rows
        ],
        schema=DROPPED_SCHEMA,
    )


def documents_table(documents: Iterable[Document]) -> pa.Table:
    """Indexed documents sorted by doc_id, in DOCUMENT_SCHEMA (text_key: hash of the exact text)."""
    rows = sorted(documents, key=lambda d: d.doc_id)
    return pa.Table.from_pylist(
        [{'doc_id': d.doc_id, 'source': d.source, 'chars': len(d.text), 'text_key': text_key(d.text),
          'text': d.text, 'source_bytes': d.source_bytes, 'source_hash': d.source_hash,
          'metadata': d.metadata}
         for d in rows],
        schema=DOCUMENT_SCHEMA,
    )


def write_table(table: pa.Table, path: str) -> None:
    """Writes a Parquet file to any Beam filesystem, without timestamps in it."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression='zstd')
    write_bytes(path, buffer.getvalue())


def write_bytes(path: str, data: bytes) -> None:
    """Writes a whole file to any Beam filesystem."""
    with FileSystems.create(path) as f:
        f.write(data)


def build_faiss_index(embeddings: np.ndarray, dim: Optional[int] = None):
    """An exact inner-product index; rows are normalized, so scores are cosines."""
    import faiss

    dim = embeddings.shape[1] if embeddings.size else dim
    index = faiss.IndexFlatIP(dim)
    if len(embeddings):
        index.add(np.ascontiguousarray(embeddings, dtype=np.float32))
    return index


def write_chunk_outputs(chunks: list[Chunk], output: str, dim: int) -> None:
    """Writes chunks/, index/index.faiss, index/ids.parquet and bm25/, all in one order.

    Row i of the chunks table, position i of the FAISS index, row i of
    ids.parquet and document i of the BM25 index are the same chunk. BM25 is
    built here, once, so that queries never rebuild it.
    """
    import faiss

    chunks = sorted_chunks(chunks)
    write_table(chunks_table(chunks), posixpath.join(output, CHUNKS_DIR, PART_NAME))
    checkpoint('chunks_written')
    vectors = np.stack([c.embedding for c in chunks]) if chunks else np.zeros((0, dim), np.float32)
    index = build_faiss_index(vectors, dim)
    write_bytes(posixpath.join(output, INDEX_DIR, INDEX_FILE), faiss.serialize_index(index).tobytes())
    ids = pa.table({'chunk_id': [c.chunk_id for c in chunks]}, schema=IDS_SCHEMA)
    write_table(ids, posixpath.join(output, INDEX_DIR, IDS_FILE))
    if chunks:
        from transforms.retrieval import bm25_files

        for name, data in bm25_files([c.text for c in chunks]).items():
            write_bytes(posixpath.join(output, BM25_DIR, name), data)


def write_json(path: str, value) -> None:
    """Writes indented, key-sorted JSON to any Beam filesystem, atomically (see `write_atomic`)."""
    write_atomic(path, (json.dumps(value, indent=2, sort_keys=True) + '\n').encode('utf-8'))


class WriteIndex(beam.PTransform):
    """Writes chunks/, index/, bm25/, rejected/, dropped/ and documents/ under `output`.

    Input: a dict with 'chunks' (PCollection[Chunk] with embeddings: the kept
    chunks), 'rejected' (PCollection[Rejected]) and optionally 'dropped'
    (PCollection[Dropped]) and 'documents' (PCollection[Document]); each
    optional table is written, possibly empty, whenever its key is present.
    Returns nothing useful. Each table is gathered on one worker and sorted before
    writing, so the bytes do not depend on the runner.
    """

    def __init__(self, output: str, dim: int):
        super().__init__()
        self._output = output
        self._dim = dim

    def expand(self, pcolls):
        chunks = (
            pcolls['chunks']
            | 'GatherChunks' >> beam.combiners.ToList()
            | 'WriteChunksAndIndex' >> beam.Map(write_chunk_outputs, self._output, self._dim)
        )
        rejected = (
            pcolls['rejected']
            | 'GatherRejected' >> beam.combiners.ToList()
            | 'ToRejectedTable' >> beam.Map(rejected_table)
            | 'WriteRejected'
            >> beam.Map(write_table, posixpath.join(self._output, REJECTED_DIR, PART_NAME))
        )
        outputs = {'chunks': chunks, 'rejected': rejected}
        if 'documents' in pcolls:
            outputs['documents'] = (
                pcolls['documents']
                | 'GatherDocuments' >> beam.combiners.ToList()
                | 'ToDocumentsTable' >> beam.Map(documents_table)
                | 'WriteDocuments'
                >> beam.Map(write_table, posixpath.join(self._output, DOCUMENTS_DIR, PART_NAME))
            )
        if 'dropped' in pcolls:
            outputs['dropped'] = (
                pcolls['dropped']
                | 'GatherDropped' >> beam.combiners.ToList()
                | 'ToDroppedTable' >> beam.Map(dropped_table)
                | 'WriteDropped'
                >> beam.Map(write_table, posixpath.join(self._output, DROPPED_DIR, PART_NAME))
            )
        return outputs


def staging_path(output: str) -> str:
    """A fresh sibling of `output` that a run fills before publishing it."""
    import os
    import time

    return f'{output.rstrip("/")}.staging-{os.getpid()}-{time.time_ns()}'


def clean_staging(output: str) -> list[str]:
    """Deletes the staging directories that killed plain builds left next to `output`.

    Only safe while no other build writes to `output` (its lock is held). A
    build killed between the two renames of `publish` left no `output` but
    the previous index whole as `*.old`: that one is put back, not deleted.
    Local outputs only; object stores are published file by file.

    Returns:
      The deleted paths.
    """
    if '://' in output:
        return []
    import glob
    import os
    import shutil

    leftovers = sorted(glob.glob(glob.escape(output.rstrip('/')) + '.staging-*'))
    previous = [p for p in leftovers if p.endswith('.old') and os.path.isdir(p)]
    if previous and not os.path.exists(output):
        newest = max(previous, key=os.path.getmtime)
        os.rename(newest, output)
        leftovers.remove(newest)
    for path in leftovers:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    return leftovers


def check_replaceable(output: str) -> None:
    """Refuses to replace a non-empty directory that is not a ragsieve output.

    Raises:
      ValueError: if `output` is a file, or holds files but no manifest.json.
    """
    if not FileSystems.exists(output):
        return
    if '://' not in output:
        import os

        if not os.path.isdir(output):
            raise ValueError(f'--output {output!r} is a file, not a directory: refusing to replace it')
    if FileSystems.exists(posixpath.join(output, MANIFEST_FILE)):
        return
    if FileSystems.match([output.rstrip('/') + '/**'], limits=[1])[0].metadata_list:
        raise ValueError(
            f'--output {output!r} is a non-empty directory without {MANIFEST_FILE}; '
            'refusing to replace it: choose an empty or new directory'
        )


def publish(staging: str, output: str) -> None:
    """Moves a finished run from `staging` to `output`, replacing the previous index.

    Locally two directory renames: the old index stays whole until the new one
    is complete. On object stores files are moved one by one (versioned
    outputs, with a LATEST pointer, give readers an atomic switch there).
    """
    if '://' not in output:
        import os
        import shutil

        old = None
        if os.path.exists(output):
            old = staging + '.old'
            os.rename(output, old)
        os.rename(staging, output)
        if old:
            shutil.rmtree(old)
        return
    if FileSystems.exists(output):
        FileSystems.delete([output])
    sources = sorted(m.path for m in FileSystems.match([staging + '/**'])[0].metadata_list)
    FileSystems.rename(sources, [output.rstrip('/') + s[len(staging) :] for s in sources])
    FileSystems.delete([staging])


def split_complete(files: Iterable[tuple[str, str, float]], marker: str) -> tuple[list[str], list[str]]:
    """Splits directories into complete (holding `marker`) and incomplete ones.

    Args:
      files: `(directory, file name, mtime)` of the files found.
      marker: The file a writer creates last, when the directory is complete.

    Returns:
      `(complete, incomplete)`: complete ones oldest first by their marker's
      time (names need not sort in run order), incomplete ones by name.
    """
    seen = set()
    completed_at: dict[str, float] = {}
    for directory, name, mtime in files:
        seen.add(directory)
        if name == marker:
            completed_at[directory] = mtime
    complete = sorted(completed_at, key=lambda d: (completed_at[d], d))
    return complete, sorted(seen - set(complete))


def delete_trees(paths: Iterable[str]) -> None:
    """Deletes directories with everything under them, on any Beam filesystem."""
    paths = list(paths)
    if not paths:
        return
    # Object stores delete a "directory" as the prefix `dir/`; the local filesystem wants `dir`.
    FileSystems.delete([p.rstrip('/') + '/' if '://' in p else p.rstrip('/') for p in paths])


def write_atomic(path: str, data: bytes) -> None:
    """Writes a whole file so that readers see the old content or the new, never a part.

    Locally a temporary sibling is renamed over `path`; object stores
    (gs://, s3://) publish an object only when its upload completes.
    """
    if '://' in path:
        write_bytes(path, data)
        return
    import os

    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    temporary = f'{path}.tmp-{os.getpid()}'
    with open(temporary, 'wb') as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def checkpoint(name: str) -> None:
    """Kills this process with SIGKILL when the environment names this point (tests only)."""
    import os

    if os.environ.get(KILL_AT_ENV) == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
