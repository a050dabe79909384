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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms import storage
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


_NULL = b'\xff'


def _field(value: Optional[str]) -> bytes:
    # Length-prefixed, with None apart from '', so no two rows share a byte string.
    if value is None:
        return _NULL
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
    """`row_hash` of every row of a table with the `FIELDS` (no vector read), `_fields`' bytes built by Arrow."""
    blobs = _field_blobs(table)
    offsets = np.frombuffer(blobs.buffers()[1], np.int64)[blobs.offset:blobs.offset + len(blobs) + 1].tolist()
    data = memoryview(blobs.buffers()[2] or b'')
    made_by = vectors_id.encode('utf-8')
    personal = hashlib.blake2b(digest_size=16, person=b'ragsieve-row').copy  # cheaper than a new one per row
    found = []
    for start, end in zip(offsets[:-1], offsets[1:]):
        digest = personal()
        digest.update(data[start:end])
        digest.update(made_by)
        found.append(digest.hexdigest())
    return found


def _field_blobs(table: pa.Table) -> pa.Array:
    """Per row, the bytes `_fields` makes of it, as one large_binary array (a Python loop per row costs 3x)."""
    null = pa.scalar(_NULL, pa.large_binary())
    parts = []
    for name in FIELDS[:-1]:
        column = _array(table.column(name)).cast(pa.large_binary())
        lengths = pc.binary_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype('<u8')
        prefix = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(column),
                                                      [None, pa.py_buffer(lengths.tobytes())])
        parts += [pc.if_else(pc.is_valid(column), prefix.cast(pa.large_binary()), null), column.fill_null(b'')]
    salience = _array(table.column('salience'))
    values = salience.fill_null(0).to_numpy(zero_copy_only=False).astype('<f4')
    packed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), len(salience), [None, pa.py_buffer(values.tobytes())])
    parts.append(pc.if_else(pc.is_valid(salience), packed.cast(pa.large_binary()), null))
    return pc.binary_join_element_wise(*parts, pa.scalar(b'', pa.large_binary()))


def _array(column) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def content_digests(table: pa.Table) -> list[str]:
    """`content_digest` of every row of a table with the `CONTENT_COLUMNS`; a row without a vector has its own."""
    embedding = _array(table.column('embedding'))
    vectors = vector_matrix(embedding.fill_null([0.0] * _width(embedding)) if embedding.null_count else embedding)
    valid = embedding.is_valid().to_pylist()
    return [content_digest(c, d, t, vectors[i], m, k, s) if valid[i] else 'no vector'
            for i, (c, d, t, m, k, s) in enumerate(zip(*_columns(table)))]


def _width(column: pa.Array) -> int:
    return column.type.list_size if pa.types.is_fixed_size_list(column.type) else 0


def schema_difference(found, expected) -> Optional[str]:
    """How columns differ (`lacks [...]; has [...] besides; embedding is X, not Y`), or None when they match.

    Args:
      found: The store's columns: an Arrow schema or `{name: type}` in order.
      expected: Those of ragsieve's rows, alike.
    """
    found, expected = _types(found), _types(expected)
    if list(found.items()) == list(expected.items()):
        return None
    notes = []
    missing = [c for c in expected if c not in found]
    extra = [c for c in found if c not in expected]
    if missing:
        notes.append(f'lacks {missing}')
    if extra:
        notes.append(f'has {extra} besides')
    notes += [f'{c} is {found[c]}, not {expected[c]}' for c in expected if c in found and found[c] != expected[c]]
    return '; '.join(notes) or 'its columns are in another order'


def _types(columns) -> dict:
    if isinstance(columns, pa.Schema):
        return {f.name: str(f.type) for f in columns}
    return dict(columns)


def too_long(table: pa.Table, limits: dict, what: str) -> list[Optional[str]]:
    """Per row, which of its string columns exceeds its limit in UTF-8 bytes (`{column: bytes}`), or None.

    Columns of `limits` the table lacks are not checked (the run id and the
    row hash, which ragsieve makes, are added after).
    """
    reasons = [None] * table.num_rows
    for name, limit in limits.items():
        if name not in table.column_names:
            continue
        lengths = pc.binary_length(_array(table.column(name))).fill_null(0).to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(lengths > limit).tolist():
            reasons[i] = reasons[i] or f'{name} is {lengths[i]} bytes, over {what}\'s {limit}'
    return reasons


def with_nul(table: pa.Table, columns: Sequence[str], what: str) -> list[Optional[str]]:
    """Per row, which of its string columns holds a NUL character (which `what` cannot store), or None."""
    reasons = [None] * table.num_rows
    for name in [c for c in columns if c in table.column_names]:
        found = pc.match_substring(_array(table.column(name)), '\x00').fill_null(False).to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(found).tolist():
            reasons[i] = reasons[i] or f'{name} holds a NUL character, which {what} cannot store'
    return reasons


def merge_reasons(*found: list[Optional[str]]) -> list[Optional[str]]:
    """Per row, the first reason any of the lists gives."""
    return [next((r for r in reasons if r), None) for reasons in zip(*found)]


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


def read_vectors(path: str, positions: Sequence[int]) -> pa.Array:
    """The `embedding` of the rows at `positions` of one part, reading only the row groups that hold them.

    Parquet decodes a column a row group at a time; a part the build wrote
    is one row group up to 1Mi rows, so there the whole column is decoded.

    Raises:
      ValueError: One line naming the part, when it cannot be read.
    """
    def read(p: str) -> pa.Array:
        with storage.open_read(p) as f:
            part = pq.ParquetFile(f)
            sizes = [part.metadata.row_group(g).num_rows for g in range(part.num_row_groups)]
            starts = np.cumsum([0] + sizes)
            group_of = np.searchsorted(starts, positions, side='right') - 1
            groups = sorted(set(group_of.tolist()))
            column = _array(part.read_row_groups(groups, columns=['embedding']).column('embedding'))
        # Where each chosen group begins in what was read.
        begins = dict(zip(groups, np.cumsum([0] + [sizes[g] for g in groups]).tolist()))
        local = [begins[g] + i - int(starts[g]) for i, g in zip(positions, group_of.tolist())]
        return column.take(pa.array(local, pa.int64()))

    return tables.load_file(path, read)


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
    # The rows of each part, once `run_check.checked_run` read their footers.
    part_rows: tuple = ()

    @classmethod
    def of(cls, directory: str) -> 'Run':
        """Reads the run's manifest.

        Raises:
          ValueError: If the manifest cannot be read or lacks what a sync needs.
        """
        path = posixpath.join(directory, tables.MANIFEST_FILE)
        try:
            manifest = json.loads(storage.read_bytes(path).decode('utf-8'))
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
