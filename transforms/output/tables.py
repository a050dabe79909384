"""The output contract: table and file names, schemas, sharding, rows, and THE table reader."""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Iterable, Iterator, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from transforms import storage
from transforms.hashing import stable_hash
from transforms.text import text_key
from transforms.types import Chunk, Document, Dropped, Rejected
from transforms.validate import vector_problem

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
# Next to the manifest: what changed since the previous build, and the page a person reads.
DIFF_FILE = 'diff.json'
REPORT_FILE = 'report.html'

# Every table is a directory of parts `part-SSSSS-of-NNNNN.parquet`. A row's part
# is a stable hash of its shard column (doc_id), so all rows of a document
# share one part; rows are sorted inside a part. Row i of a table is row i of
# its parts read in shard order (see `read_table`).
PART_PREFIX = 'part-'
PART_SUFFIX = '.parquet'

# `--num_shards` default: one part per this much input; never more than MAX_SHARDS parts,
# whether sized from the input or given (every part is a file of every table, empty or not).
SHARD_INPUT_BYTES = 2 << 20
MAX_SHARDS = 1024

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
        # 'chunk', or 'delta': novel sentences of a dropped duplicate (transforms/lineage/deltas.py).
        ('kind', pa.string()),
        # For a delta, the kept chunk representing the chunk it comes from.
        ('delta_of', pa.string()),
        # The chunks dropped as this chunk's duplicates, through every filter (transforms/lineage/represents.py).
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

# What each column holds, for the docs' output reference (pipelines.reference);
# a test checks every column of every table has one.
COLUMN_DOCS = {
    CHUNKS_DIR: {
        'chunk_id': '`{doc_id}#{chunk_index}`; a delta adds `~delta{k}`',
        'doc_id': 'the document it comes from',
        'chunk_index': 'its position among the document\'s chunks',
        'text': 'the chunk\'s exact text',
        'char_start': 'offset of its first character in the document\'s text',
        'char_end': 'offset after its last character: `document[char_start:char_end] == text`',
        'n_tokens': 'tokens of the embedding model\'s tokenizer',
        'content_hash': 'blake2b of the NFKC-casefolded, whitespace-collapsed text',
        'embedding': 'L2-normalized float32 vector; row i is FAISS position i',
        'metadata': 'JSON: the document\'s metadata, plus `pages` (PDF) or `heading_path` (HTML, DOCX)',
        'entities': '`LABEL:text` names, when a filter needed entities; else null',
        'topic': 'KMeans topic, when a `*_topics` filter ran; else null',
        'salience': 'cosine to the document\'s mean embedding after boosts, when `intra_doc` ran',
        'kind': '`chunk`, or `delta`: whole sentences of a dropped duplicate that the kept chunk lacks',
        'delta_of': 'for a delta, the kept chunk that represents the chunk it comes from',
        'represents': '`{chunk_id, doc_id}` of every chunk dropped as its duplicate, through the whole cascade',
    },
    DROPPED_DIR: {
        'chunk_id': 'the dropped chunk',
        'doc_id': 'its document',
        'text': 'its text',
        'char_start': 'its offsets in the document\'s text',
        'char_end': 'as in chunks/',
        'reason': 'the filter that dropped it (or a filter\'s own reason, e.g. `intra_doc_near`)',
        'duplicate_of': 'the kept chunk it duplicates; null for `random` and `intra_doc_low_salience`',
        'score': 'the cosine, estimated Jaccard or entity overlap behind the decision',
        'features': 'the features it had been given when dropped (features are computed lazily)',
    },
    REJECTED_DIR: {
        'source': 'the file, or `file:line` / `file:row` of a record',
        'doc_id': 'the record\'s id, when it had one',
        'reason': 'why it could not be indexed (see the reasons below)',
        'detail': 'one line saying what was wrong',
    },
    DOCUMENTS_DIR: {
        'doc_id': 'the document\'s id: the path under the input root, or the record\'s `id`',
        'source': 'the file (and line or row) it was read from',
        'chars': 'characters of its text',
        'text_key': 'blake2b of its exact text: what diff.json compares',
        'text': 'the text chunk offsets index into (extracted, for HTML, PDF and DOCX)',
        'source_bytes': 'size of the raw file; null for .jsonl and .parquet records',
        'source_hash': 'blake2b of the raw file; null for .jsonl and .parquet records',
        'metadata': 'its metadata JSON: query-time filters match represented documents through it',
    },
}


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
    return stable_hash(key, person=_SHARD_PERSON) % num_shards


def part_name(shard: int, num_shards: int) -> str:
    """`part-SSSSS-of-NNNNN.parquet`."""
    return f'{PART_PREFIX}{shard:05d}-of-{num_shards:05d}{PART_SUFFIX}'


def default_num_shards(input_bytes: int) -> int:
    """The `--num_shards` default: one part per SHARD_INPUT_BYTES of input, 1 to MAX_SHARDS.

    The corpus size is not known when the pipeline is built, its input's size
    is (file sizes, without reading them). A part then holds the rows of
    about 2 MiB of text (14k chunks of 48 tokens, 20 MB of float32
    embeddings): what a worker holds while it writes it.
    """
    return max(1, min(MAX_SHARDS, -(-input_bytes // SHARD_INPUT_BYTES)))


def part_paths(directory: str) -> list[str]:
    """The parts of a table directory, in shard order.

    Raises:
      ValueError: If the directory holds no parts, or not exactly the set
        `part-00000..N-1-of-N` of one N.
    """
    pattern = posixpath.join(directory, f'{PART_PREFIX}*{PART_SUFFIX}')
    found = [f.path for f in storage.match(pattern)]
    if not found:
        raise ValueError(f'{directory} holds no {PART_PREFIX}*{PART_SUFFIX} files')
    names = [posixpath.basename(p) for p in found]
    num_shards = int(names[0][len(PART_PREFIX) :].split('-of-')[1][: -len(PART_SUFFIX)])
    if names != [part_name(i, num_shards) for i in range(num_shards)]:
        raise ValueError(f'{directory} does not hold exactly the parts 0..{num_shards - 1} of {num_shards}: {names}')
    return found


def columns_table() -> str:
    """The docs' table of every output table's columns, from the schemas and `COLUMN_DOCS`."""
    lines = ['| table | column | type | holds |', '| --- | --- | --- | --- |']
    for spec in (CHUNKS_TABLE, DROPPED_TABLE, REJECTED_TABLE, DOCUMENTS_TABLE):
        for field in spec.schema:
            lines.append(f'| `{spec.directory}/` | `{field.name}` | {field.type} | '
                         f'{COLUMN_DOCS[spec.directory][field.name]} |')
    return '\n'.join(lines) + '\n'


def load_file(path: str, load):
    """`load(path)`, with any failure turned into one line naming the file.

    Raises:
      ValueError: `PATH is missing` or `PATH is corrupt or unreadable (why)`.
    """
    try:
        return load(path)
    except FileNotFoundError:
        raise ValueError(f'{path} is missing: the index is incomplete or was deleted') from None
    except Exception as e:  # faiss, pyarrow, json and bm25s each raise their own types
        first_line = (str(e).strip().splitlines() or [''])[0][:300]
        raise ValueError(f'{path} is corrupt or unreadable ({type(e).__name__}: {first_line})') from None


def read_part(path: str, columns: Optional[Sequence[str]] = None, present_only: bool = False) -> pa.Table:
    """One part file of a table (see `iter_parts`); a failure is one line naming it (`load_file`)."""
    return load_file(path, lambda p: _read_part(p, columns, present_only))


def read_schema(path: str) -> pa.Schema:
    """The columns of one Parquet file, from its footer (load it through `load_file`)."""
    with storage.open_read(path) as f:
        return pq.ParquetFile(f).schema_arrow


def table_problem(directory: str, columns: Sequence[str] = ()) -> Optional[str]:
    """Why a written table cannot be read, in one line naming the file, or None when it can.

    Reads the footer of each part, not its rows: a table whose parts were
    deleted, overwritten with other bytes or truncated, or that lacks one
    of `columns`, is found at the cost of a few KB per part.
    """
    if not storage.has_files(directory):
        return f'{directory} is missing'
    try:
        for path in part_paths(directory):
            missing = sorted(set(columns) - set(load_file(path, read_schema).names))
            if missing:
                return f'{path} has no column(s) {missing}'
    except ValueError as e:
        return str(e)
    return None


def _read_part(path: str, columns: Optional[Sequence[str]], present_only: bool) -> pa.Table:
    with storage.open_read(path) as f:
        part = pq.ParquetFile(f)
        if present_only and columns is not None:
            columns = [c for c in columns if c in part.schema_arrow.names]
        return part.read(columns=columns)


def iter_parts(directory: str, columns: Optional[Sequence[str]] = None,
               present_only: bool = False) -> Iterator[pa.Table]:
    """The parts of a table, one at a time, in shard order (any Beam filesystem).

    Args:
      directory: The table's directory.
      columns: The columns to read; None for all.
      present_only: Read only those of `columns` a part has (older builds
        lack the newer ones) instead of failing.

    Raises:
      ValueError: If the parts are not a complete set (`part_paths`), or one
        naming the part that cannot be read (`load_file`).
    """
    for path in part_paths(directory):
        yield read_part(path, columns, present_only)


def read_table(directory: str, columns: Optional[Sequence[str]] = None, present_only: bool = False) -> pa.Table:
    """A whole table: its parts concatenated in shard order, so row i is the i-th row of the build.

    The one reader of the output tables; see `iter_parts` for the arguments.
    """
    return pa.concat_tables(list(iter_parts(directory, columns, present_only)))


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


def chunk_row(chunk: Chunk) -> dict:
    """A chunk as a row of the chunks table: its fields named like the columns.

    The one door of vectors into chunks/ and so into every index built from
    it (FAISS, the stores `sync` writes).

    Raises:
      ValueError: Naming the chunk, if its embedding holds a NaN or an
        infinity or is not of unit length, whatever it came from.
    """
    if chunk.embedding is not None:
        problem = vector_problem(chunk.embedding)
        if problem:
            raise ValueError(f'chunk {chunk.chunk_id!r}: its embedding is not indexed: {problem}')
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
