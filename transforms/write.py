"""Writing the output contract: sharded Parquet tables, sorted and byte-stable, then the indexes."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import posixpath
import time
from typing import Iterable, Iterator, Mapping, Optional, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

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
# Every table is a directory of parts `part-SSSSS-of-NNNNN.parquet`. A row's part
# is a stable hash of its shard column (doc_id), so all rows of a document
# share one part; rows are sorted inside a part. Row i of a table is row i of
# its parts read in shard order (see `read_table`).
PART_PREFIX = 'part-'
PART_SUFFIX = '.parquet'
# `--num_shards` default: one part per this much input, at most MAX_DEFAULT_SHARDS.
SHARD_INPUT_BYTES = 2 << 20
MAX_DEFAULT_SHARDS = 1024
# Keys the shard hash, so sharding does not correlate with other blake2 uses of the same ids.
_SHARD_PERSON = b'ragsieve-shard'

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
        # The features the chunk had been given when dropped (`Chunk.features`):
        # features are computed lazily, so one dropped by an early filter has fewer.
        ('features', pa.list_(pa.string())),
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


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """One sharded output table: its directory, its columns, how rows are sharded and ordered.

    Attributes:
      directory: Directory name of the table under the output root.
      schema: Its columns; rows are dicts with exactly these keys.
      shard_column: Rows with equal values here share a part; a null value
        shards by `fallback_column`.
      sort_columns: Order inside a part; together they identify a row.
      fallback_column: Shard column for rows whose shard_column is null.
      unique: Keep one row per sort key (equal keys hold equal rows, as in a cache).
    """

    directory: str
    schema: pa.Schema
    shard_column: str
    sort_columns: tuple[str, ...]
    fallback_column: Optional[str] = None
    unique: bool = False

    def __post_init__(self):
        for column in (self.shard_column, *self.sort_columns, *filter(None, [self.fallback_column])):
            if column not in self.schema.names:
                raise ValueError(f'{self.directory}: no column {column!r} in {self.schema.names}')

    def shard_key(self, row: Mapping) -> str:
        key = row[self.shard_column]
        if key is None and self.fallback_column:
            key = row[self.fallback_column]
        return '' if key is None else str(key)

    def sort_key(self, row: Mapping) -> tuple:
        # Nulls first; (False, None) never needs comparing with a value.
        return tuple((row[c] is not None, row[c]) for c in self.sort_columns)


# A delta shares its dropped chunk's chunk_index: chunk_id orders them (see Chunk.sort_key).
CHUNKS_TABLE = TableSpec(CHUNKS_DIR, CHUNK_SCHEMA, 'doc_id', ('doc_id', 'chunk_index', 'chunk_id'))
# A dropped row has no chunk_index: char_start orders a document's chunks alike.
DROPPED_TABLE = TableSpec(DROPPED_DIR, DROPPED_SCHEMA, 'doc_id', ('doc_id', 'char_start', 'chunk_id'))
REJECTED_TABLE = TableSpec(
    REJECTED_DIR, REJECTED_SCHEMA, 'doc_id', ('source', 'reason', 'doc_id'), fallback_column='source')
DOCUMENTS_TABLE = TableSpec(DOCUMENTS_DIR, DOCUMENT_SCHEMA, 'doc_id', ('doc_id',))


def shard_of(key: str, num_shards: int) -> int:
    """The part of a shard key: a keyed blake2b hash, the same on every worker and run."""
    digest = hashlib.blake2b(key.encode('utf-8'), digest_size=8, person=_SHARD_PERSON).digest()
    return int.from_bytes(digest, 'big') % num_shards


def part_name(shard: int, num_shards: int) -> str:
    """`part-SSSSS-of-NNNNN.parquet`."""
    return f'{PART_PREFIX}{shard:05d}-of-{num_shards:05d}{PART_SUFFIX}'


def default_num_shards(input_bytes: int) -> int:
    """The `--num_shards` default: one part per SHARD_INPUT_BYTES of input, 1 to MAX_DEFAULT_SHARDS.

    The corpus size is not known when the pipeline is built, its input's size
    is (file sizes, without reading them). A part then holds the rows of
    about 2 MiB of text (14k chunks of 48 tokens, 20 MB of float32
    embeddings): what a worker holds while it writes it.
    """
    return max(1, min(MAX_DEFAULT_SHARDS, -(-input_bytes // SHARD_INPUT_BYTES)))


def part_paths(directory: str) -> list[str]:
    """The parts of a table directory, in shard order.

    Raises:
      ValueError: If the directory holds no parts, or not exactly the set
        `part-00000..N-1-of-N` of one N.
    """
    pattern = posixpath.join(directory, f'{PART_PREFIX}*{PART_SUFFIX}')
    found = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    if not found:
        raise ValueError(f'{directory} holds no {PART_PREFIX}*{PART_SUFFIX} files')
    names = [posixpath.basename(p) for p in found]
    num_shards = int(names[0][len(PART_PREFIX) :].split('-of-')[1][: -len(PART_SUFFIX)])
    if names != [part_name(i, num_shards) for i in range(num_shards)]:
        raise ValueError(f'{directory} does not hold exactly the parts 0..{num_shards - 1} of {num_shards}: {names}')
    return found


def iter_parts(directory: str, columns: Optional[Sequence[str]] = None) -> Iterator[pa.Table]:
    """The parts of a table, one at a time, in shard order (any Beam filesystem)."""
    for path in part_paths(directory):
        with FileSystems.open(path) as f:
            yield pq.read_table(f, columns=columns)


def read_table(directory: str, columns: Optional[Sequence[str]] = None) -> pa.Table:
    """A whole table: its parts concatenated in shard order, so row i is the i-th row of the build."""
    return pa.concat_tables(list(iter_parts(directory, columns)))


def rows_table(rows: Sequence[Mapping], schema: pa.Schema) -> pa.Table:
    """Row dicts as a table in `schema` (numpy vectors and tuples become lists)."""
    return pa.table([pa.array([r[name] for r in rows], type=schema.field(name).type) for name in schema.names],
                    schema=schema)


def part_table(rows: Iterable[Mapping], spec: TableSpec) -> pa.Table:
    """One part's rows, sorted (and deduplicated for a unique table), as a table."""
    ordered = sorted(rows, key=spec.sort_key)
    if spec.unique:
        ordered = [r for i, r in enumerate(ordered) if i == 0 or spec.sort_key(ordered[i - 1]) != spec.sort_key(r)]
    return rows_table(ordered, spec.schema)


def write_parts(rows: Iterable[Mapping], spec: TableSpec, directory: str, num_shards: int) -> None:
    """Writes a table whose rows are all here (small tables, evaluation), parts as a pipeline would."""
    by_shard: dict[int, list] = {s: [] for s in range(num_shards)}
    for row in rows:
        by_shard[shard_of(spec.shard_key(row), num_shards)].append(row)
    for shard, shard_rows in by_shard.items():
        write_table(part_table(shard_rows, spec), posixpath.join(directory, part_name(shard, num_shards)))


def chunk_row(chunk: Chunk) -> dict:
    """A chunk as a row of the chunks table: its fields named like the columns."""
    row = {name: getattr(chunk, name) for name in CHUNK_SCHEMA.names}
    row['represents'] = [{'chunk_id': c, 'doc_id': d} for c, d in chunk.represents]
    return row


def dropped_row(dropped: Dropped) -> dict:
    c = dropped.chunk
    return {'chunk_id': c.chunk_id, 'doc_id': c.doc_id, 'text': c.text, 'char_start': c.char_start,
            'char_end': c.char_end, 'reason': dropped.reason, 'duplicate_of': dropped.duplicate_of,
            'score': dropped.score, 'features': c.features()}


def rejected_row(rejected: Rejected) -> dict:
    return {'source': rejected.source, 'doc_id': rejected.doc_id, 'reason': rejected.reason,
            'detail': rejected.detail}


def document_row(document: Document) -> dict:
    """text_key: the hash of the exact text, so a later build can tell what changed."""
    return {'doc_id': document.doc_id, 'source': document.source, 'chars': len(document.text),
            'text_key': text_key(document.text), 'text': document.text,
            'source_bytes': document.source_bytes, 'source_hash': document.source_hash,
            'metadata': document.metadata}


def write_table(table: pa.Table, path: str) -> None:
    """Writes a Parquet file to any Beam filesystem, without timestamps in it."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression='zstd')
    write_bytes(path, buffer.getvalue())


def write_bytes(path: str, data: bytes) -> None:
    """Writes a whole file to any Beam filesystem."""
    with FileSystems.create(path) as f:
        f.write(data)


def _keyed_by_shard(row: Mapping, spec: TableSpec, num_shards: int) -> tuple[int, Mapping]:
    return shard_of(spec.shard_key(row), num_shards), row


class _WritePartFn(beam.DoFn):
    """(shard, rows) -> one part file; yields the number of rows written."""

    def __init__(self, spec: TableSpec, directory: str, num_shards: int):
        self._spec = spec
        self._directory = directory
        self._num_shards = num_shards
        self._rows = Metrics.counter('write', f'{spec.directory}_rows')
        self._msecs = Metrics.counter('write', 'msecs')

    def process(self, element) -> Iterable[int]:
        started = time.perf_counter()
        shard, rows = element
        table = part_table((r for r in rows if r is not None), self._spec)
        write_table(table, posixpath.join(self._directory, part_name(shard, self._num_shards)))
        self._rows.inc(table.num_rows)
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        yield table.num_rows


class WriteTable(beam.PTransform):
    """PCollection[dict] (rows of `spec.schema`) -> PCollection[int]: rows written, one per part.

    Rows are keyed by the stable hash of their shard column and grouped per
    part; each part is sorted and written by whichever worker holds its
    group, so a worker holds one part, never the table. Every part of
    `num_shards` is written, empty ones too: the file set is fixed, and the
    bytes depend only on the rows and the shard count.
    """

    def __init__(self, spec: TableSpec, directory: str, num_shards: int):
        super().__init__()
        if num_shards < 1:
            raise ValueError(f'num_shards must be >= 1, got {num_shards}')
        self._spec = spec
        self._directory = directory
        self._num_shards = num_shards

    def expand(self, rows):
        keyed = rows | 'KeyByShard' >> beam.Map(_keyed_by_shard, self._spec, self._num_shards)
        # A None per shard: empty parts get a group, and a file, too.
        every = rows.pipeline | 'EveryShard' >> beam.Create([(s, None) for s in range(self._num_shards)])
        return (
            (keyed, every)
            | 'WithEveryShard' >> beam.Flatten()
            | 'GroupByShard' >> beam.GroupByKey()
            | 'WritePart' >> beam.ParDo(_WritePartFn(self._spec, self._directory, self._num_shards))
        )


def write_json(path: str, value) -> None:
    """Writes indented, key-sorted JSON to any Beam filesystem, atomically (see `write_atomic`)."""
    write_atomic(path, (json.dumps(value, indent=2, sort_keys=True) + '\n').encode('utf-8'))


# The tables WriteIndex writes: input key, table, element -> row.
OUTPUT_TABLES = (
    ('chunks', CHUNKS_TABLE, chunk_row),
    ('rejected', REJECTED_TABLE, rejected_row),
    ('dropped', DROPPED_TABLE, dropped_row),
    ('documents', DOCUMENTS_TABLE, document_row),
)


class WriteIndex(beam.PTransform):
    """Writes chunks/, rejected/, dropped/ and documents/ under `output`, then index/ and bm25/.

    Input: a dict with 'chunks' (PCollection[Chunk] with embeddings: the kept
    chunks), 'rejected' (PCollection[Rejected]) and optionally 'dropped'
    (PCollection[Dropped]) and 'documents' (PCollection[Document]); each
    optional table is written, possibly empty, whenever its key is present.
    Every table is written in `num_shards` parts by `WriteTable`; the FAISS
    and BM25 indexes are then assembled from the written chunk parts (see
    `transforms.indexes`). Returns the PCollections of rows written per part,
    by table, and 'indexes'.
    """

    def __init__(self, output: str, dim: int, num_shards: int, index_config=None):
        super().__init__()
        from transforms.indexes import IndexConfig

        self._output = output
        self._dim = dim
        self._num_shards = num_shards
        self._index_config = index_config or IndexConfig()

    def expand(self, pcolls):
        from transforms.indexes import BuildIndexes

        outputs = {}
        for key, spec, to_row in OUTPUT_TABLES:
            if key not in pcolls:
                continue
            name = key.title()
            outputs[key] = (
                pcolls[key]
                | f'{name}Rows' >> beam.Map(to_row)
                | f'Write{name}' >> WriteTable(spec, posixpath.join(self._output, spec.directory), self._num_shards)
            )
        outputs['indexes'] = outputs['chunks'] | 'BuildIndexes' >> BuildIndexes(
            self._output, self._dim, self._index_config)
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
