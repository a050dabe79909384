"""The rows a vector store holds for a run: their schema, their hash, read part by part from chunks/."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import struct
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.output import tables

# What a store row carries besides the run id and its hash, from chunks/.
CONTENT_COLUMNS = ('chunk_id', 'doc_id', 'text', 'embedding', 'metadata', 'kind', 'salience')
RUN_ID = 'run_id'
ROW_HASH = 'row_hash'
COLUMNS = CONTENT_COLUMNS + (RUN_ID, ROW_HASH)


def store_schema(dim: int) -> pa.Schema:
    """The Arrow schema of a store's rows; vectors are fixed-size float32, as stores index them."""
    return pa.schema([
        ('chunk_id', pa.string()),
        ('doc_id', pa.string()),
        ('text', pa.string()),
        ('embedding', pa.list_(pa.float32(), dim)),
        ('metadata', pa.string()),
        ('kind', pa.string()),
        ('salience', pa.float32()),
        (RUN_ID, pa.string()),
        (ROW_HASH, pa.string()),
    ])


def _field(value: Optional[str]) -> bytes:
    # Length-prefixed, with None apart from '', so no two rows share a byte string.
    if value is None:
        return b'\xff'
    data = value.encode('utf-8')
    return struct.pack('<Q', len(data)) + data


def _fields(chunk_id, doc_id, text, metadata, kind, salience) -> bytes:
    return b''.join([_field(chunk_id), _field(doc_id), _field(text), _field(metadata), _field(kind),
                     b'\xff' if salience is None else struct.pack('<f', salience)])


def row_hash(chunk_id: str, doc_id: str, text: str, metadata: Optional[str], kind: str,
             salience: Optional[float], vectors_id: str) -> str:
    """The stored `row_hash` of a row: its fields, and not its vector but what made it.

    A build's vectors are the same bits for the same text, model and kernels
    (docs/guarantees.md), so `vectors_id` (`vectors_id_of` the run) stands
    for the vector: a nightly sync compares rows without decoding a vector,
    and a new model or kernel mode changes every row's hash.
    """
    digest = hashlib.blake2b(_fields(chunk_id, doc_id, text, metadata, kind, salience), digest_size=16,
                             person=b'ragsieve-row')
    digest.update(vectors_id.encode('utf-8'))
    return digest.hexdigest()


def content_digest(chunk_id: str, doc_id: str, text: str, embedding: np.ndarray, metadata: Optional[str],
                   kind: str, salience: Optional[float]) -> str:
    """A digest of what a row actually holds, vector bytes included (`--deep`, `--verify`).

    Computed alike from the run and from what a store reads back, so a row
    edited in the store (its text, its vector) is found whatever its row_hash says.
    """
    digest = hashlib.blake2b(_fields(chunk_id, doc_id, text, metadata, kind, salience), digest_size=16,
                             person=b'ragsieve-deep')
    digest.update(np.ascontiguousarray(embedding, dtype='<f4').tobytes())
    return digest.hexdigest()


FIELDS = ('chunk_id', 'doc_id', 'text', 'metadata', 'kind', 'salience')


def _columns(table: pa.Table) -> list[list]:
    return [table.column(c).to_pylist() for c in FIELDS]


def row_hashes(table: pa.Table, vectors_id: str) -> list[str]:
    """`row_hash` of every row of a table with the `FIELDS` (no vector read)."""
    return [row_hash(*values, vectors_id) for values in zip(*_columns(table))]


def content_digests(table: pa.Table) -> list[str]:
    """`content_digest` of every row of a table with the `CONTENT_COLUMNS`."""
    vectors = vector_matrix(table.column('embedding'))
    return [content_digest(c, d, t, vectors[i], m, k, s)
            for i, (c, d, t, m, k, s) in enumerate(zip(*_columns(table)))]


def vectors_id_of(manifest: dict) -> str:
    """What a run's vectors are a function of besides their text: the model and the kernels' probe."""
    made_by = {'model': manifest.get('model'), 'probe': (manifest.get('kernels') or {}).get('probe'),
               'versions': None if manifest.get('kernels') else manifest.get('versions')}
    return hashlib.blake2b(json.dumps(made_by, sort_keys=True).encode('utf-8'), digest_size=8).hexdigest()


def vector_matrix(column) -> np.ndarray:
    """An `(n, dim)` float32 matrix of a list or fixed-size-list column, without a Python loop."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(column) == 0:
        return np.zeros((0, 0), np.float32)
    flat = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return flat.reshape(len(column), -1)


def run_rows(part: pa.Table, run: 'Run') -> pa.Table:
    """The store rows of one chunks/ part: fixed-size vectors, the run id and each row's hash."""
    dim = run.dim
    vectors = vector_matrix(part.column('embedding')).reshape(-1, dim)
    content = {c: part.column(c) for c in CONTENT_COLUMNS if c != 'embedding'}
    content['embedding'] = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), dim)
    table = pa.table({c: content[c] for c in CONTENT_COLUMNS})
    return pa.table({
        **{c: table.column(c) for c in CONTENT_COLUMNS},
        RUN_ID: pa.array([run.run_id] * table.num_rows, pa.string()),
        ROW_HASH: pa.array(row_hashes(table, run.vectors_id), pa.string()),
    }).cast(store_schema(dim))


@dataclasses.dataclass(frozen=True)
class Run:
    """A published run, as a sync needs it: where it is and what its manifest says."""

    directory: str
    run_id: str
    rows: int
    dim: int
    vectors_id: str

    @classmethod
    def of(cls, directory: str) -> 'Run':
        """Reads the run's manifest.

        Raises:
          ValueError: If the manifest cannot be read or lacks what a sync needs.
        """
        from apache_beam.io.filesystems import FileSystems

        path = posixpath.join(directory, tables.MANIFEST_FILE)
        try:
            with FileSystems.open(path) as f:
                manifest = json.loads(f.read().decode('utf-8'))
            counts = manifest['counts']
            return cls(directory, manifest['run_id'], counts['chunks'] + counts['deltas'], manifest['model']['dim'],
                       vectors_id_of(manifest))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f'{path} is not the manifest of a finished build ({type(e).__name__}: {e})') from None

    def part_paths(self) -> list[str]:
        """The run's chunks/ parts, in shard order."""
        return tables.part_paths(posixpath.join(self.directory, tables.CHUNKS_DIR))


def batches(table: pa.Table, size: int) -> Sequence[pa.Table]:
    """`table` cut into slices of at most `size` rows (none for an empty table)."""
    return [table.slice(start, size) for start in range(0, table.num_rows, size)]
