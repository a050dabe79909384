"""Reading input files into documents; every unusable record becomes a Rejected row."""

from __future__ import annotations

import io
import json
import posixpath
import re
import time
from typing import Iterable, Iterator, Optional, Union

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms.types import Document, Rejected

TEXT_SUFFIXES = ('.txt', '.md')
JSONL_SUFFIX = '.jsonl'
PARQUET_SUFFIX = '.parquet'
DEFAULT_MAX_DOC_CHARS = 5_000_000
_GLOB_CHARS = re.compile(r'[*?\[]')

# Reason codes of Rejected rows (the `reason` column).
UNREADABLE = 'unreadable'
NOT_UTF8 = 'not_utf8'
EMPTY_TEXT = 'empty_text'
MISSING_TEXT = 'missing_text'
MISSING_ID = 'missing_id'
INVALID_RECORD = 'invalid_record'
INVALID_METADATA = 'invalid_metadata'
TOO_LARGE = 'too_large'
DUPLICATE_DOC_ID = 'duplicate_doc_id'
UNSUPPORTED_TYPE = 'unsupported_type'

Record = Union[Document, Rejected]


def expand_input(pattern: str) -> tuple[str, list[str]]:
    """Resolves `--input` to its root and the sorted files it names.

    Args:
      pattern: A file, a directory (read recursively) or a glob, local or on any
        Beam filesystem.

    Returns:
      `(root, paths)`: doc ids of text files are paths relative to `root`.
    """
    root, matches = _match_input(pattern)
    return root, sorted(m.path for m in matches)


def input_bytes(pattern: str) -> int:
    """Total size of the files `--input` names, from their metadata (nothing is read)."""
    return sum(m.size_in_bytes for m in _match_input(pattern)[1])


def _match_input(pattern: str):
    if _GLOB_CHARS.search(pattern):
        prefix = _GLOB_CHARS.split(pattern, 1)[0]
        root = prefix.rstrip('/') if prefix.endswith('/') else posixpath.dirname(prefix)
        glob = pattern
    elif _is_directory(pattern):
        root = pattern.rstrip('/')
        glob = root + '/**'
    else:
        root = posixpath.dirname(pattern)
        glob = pattern
    return root, FileSystems.match([glob])[0].metadata_list


def _is_directory(path: str) -> bool:
    if '://' not in path:
        import os

        return os.path.isdir(path)
    # Object stores have no directories: a path with objects under it is one.
    return bool(FileSystems.match([path.rstrip('/') + '/*'], limits=[1])[0].metadata_list)


def relative_id(path: str, root: str) -> str:
    """Returns `path` relative to `root`, with `/` separators."""
    if root and path.startswith(root.rstrip('/') + '/'):
        return path[len(root.rstrip('/')) + 1 :]
    return posixpath.basename(path)


def read_file(path: str, root: str, max_doc_chars: int = DEFAULT_MAX_DOC_CHARS) -> Iterator[Record]:
    """Parses one input file into documents and rejected records.

    `.txt`/`.md` give one document; `.jsonl` one per line (`id`, `text`,
    optional `metadata` object); `.parquet` one per row (same columns).
    Bytes that are not UTF-8 are rejected, not decoded with replacement: a
    replaced character would silently change the text that offsets point into.

    Args:
      path: The file.
      root: The input root, for relative doc ids.
      max_doc_chars: Longer documents are rejected as `too_large`.

    Yields:
      `Document` or `Rejected` items, in file order.
    """
    suffix = posixpath.splitext(path)[1].lower()
    if suffix not in TEXT_SUFFIXES + (JSONL_SUFFIX, PARQUET_SUFFIX):
        yield Rejected(path, None, UNSUPPORTED_TYPE, f'unsupported file type {suffix or "(none)"!r}')
        return
    try:
        with FileSystems.open(path) as f:
            data = f.read()
    except Exception as e:  # any filesystem error means the file is unusable
        yield Rejected(path, None, UNREADABLE, f'{type(e).__name__}: {e}')
        return
    if suffix in TEXT_SUFFIXES:
        yield from _read_text(path, relative_id(path, root), data, max_doc_chars)
    elif suffix == JSONL_SUFFIX:
        yield from _read_jsonl(path, data, max_doc_chars)
    else:
        yield from _read_parquet(path, data, max_doc_chars)


def _decode(source: str, doc_id: Optional[str], data: bytes) -> Union[str, Rejected]:
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError as e:
        return Rejected(source, doc_id, NOT_UTF8, f'invalid UTF-8 at byte {e.start}')


def _read_text(path, doc_id, data, max_doc_chars) -> Iterator[Record]:
    text = _decode(path, doc_id, data)
    if isinstance(text, Rejected):
        yield text
        return
    yield make_document(path, 0, doc_id, text, None, max_doc_chars)


def _read_jsonl(path, data, max_doc_chars) -> Iterator[Record]:
    content = _decode(path, None, data)
    if isinstance(content, Rejected):
        yield content
        return
    for line_no, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue  # blank lines separate nothing and hold no record
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            yield Rejected(f'{path}:{line_no}', None, INVALID_RECORD, f'invalid JSON: {e.msg}')
            continue
        yield from _from_record(path, line_no, record, max_doc_chars)


def _read_parquet(path, data, max_doc_chars) -> Iterator[Record]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as e:  # pyarrow raises several types for corrupt files
        yield Rejected(path, None, UNREADABLE, f'not a readable Parquet file: {e}')
        return
    missing = {'id', 'text'} - set(table.column_names)
    if missing:
        yield Rejected(path, None, INVALID_RECORD, f'missing column(s) {sorted(missing)}')
        return
    for row_no, record in enumerate(table.to_pylist(), start=1):
        yield from _from_record(path, row_no, record, max_doc_chars)


def _from_record(path, position, record, max_doc_chars) -> Iterator[Record]:
    source = f'{path}:{position}'
    if not isinstance(record, dict):
        yield Rejected(source, None, INVALID_RECORD, 'a record must be a JSON object')
        return
    doc_id = record.get('id')
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id.strip():
        yield Rejected(source, None, MISSING_ID, 'missing or empty "id" (string or integer)')
        return
    text = record.get('text')
    if not isinstance(text, str):
        yield Rejected(source, doc_id, MISSING_TEXT, '"text" missing or not a string')
        return
    metadata = record.get('metadata')
    if isinstance(metadata, str):  # Parquet files often carry metadata as JSON text
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            pass
    if metadata is not None and not isinstance(metadata, dict):
        yield Rejected(source, doc_id, INVALID_METADATA, '"metadata" must be an object')
        return
    yield make_document(path, position, doc_id, text, metadata, max_doc_chars)


def make_document(path, position, doc_id, text, metadata, max_doc_chars) -> Record:
    """Checks a parsed record and returns its Document, or why it is rejected."""
    source = f'{path}:{position}' if position else path
    if not text.strip():
        return Rejected(source, doc_id, EMPTY_TEXT, 'text is empty or whitespace only')
    if len(text) > max_doc_chars:
        return Rejected(
            source, doc_id, TOO_LARGE, f'{len(text)} characters > max_doc_chars={max_doc_chars}'
        )
    meta = None if metadata is None else json.dumps(metadata, sort_keys=True, ensure_ascii=False)
    return Document(doc_id=doc_id, text=text, path=path, position=position, metadata=meta)


def resolve_duplicates(doc_id: str, documents: Iterable[Document]) -> Iterator[Record]:
    """Keeps the first document of an id, by (source path, line/row); rejects the rest."""
    ordered = sorted(documents, key=lambda d: (d.path, d.position))
    yield ordered[0]
    for dup in ordered[1:]:
        yield Rejected(dup.source, doc_id, DUPLICATE_DOC_ID, f'doc id already used by {ordered[0].source}')


class _ReadFileFn(beam.DoFn):
    def __init__(self, root: str, max_doc_chars: int):
        self._root = root
        self._max_doc_chars = max_doc_chars
        self._files = Metrics.counter('read', 'files')
        self._documents = Metrics.counter('read', 'documents')
        self._msecs = Metrics.counter('read', 'msecs')

    def process(self, path: str):
        self._files.inc()
        started = time.perf_counter()
        records = list(read_file(path, self._root, self._max_doc_chars))
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        for record in records:
            if isinstance(record, Rejected):
                Metrics.counter('read', f'rejected_{record.reason}').inc()
                yield beam.pvalue.TaggedOutput('rejected', record)
            else:
                self._documents.inc()
                yield record


def _key_by_doc_id(document: Document):
    return document.doc_id, document


def _resolve_group(item):
    doc_id, documents = item
    for record in resolve_duplicates(doc_id, documents):
        if isinstance(record, Rejected):
            Metrics.counter('read', f'rejected_{record.reason}').inc()
            yield beam.pvalue.TaggedOutput('rejected', record)
        else:
            yield record


class ReadDocuments(beam.PTransform):
    """PBegin -> {'documents': PCollection[Document], 'rejected': PCollection[Rejected]}.

    The file list is expanded when the pipeline is built, so an input that
    matches nothing fails fast with a clear error instead of an empty index.
    """

    def __init__(self, pattern: str, max_doc_chars: int = DEFAULT_MAX_DOC_CHARS):
        super().__init__()
        if max_doc_chars <= 0:
            raise ValueError(f'max_doc_chars must be > 0, got {max_doc_chars}')
        self._root, self._paths = expand_input(pattern)
        if not self._paths:
            raise ValueError(f'--input {pattern!r} matches no file')
        self._max_doc_chars = max_doc_chars

    def expand(self, pbegin):
        parsed = (
            pbegin
            | 'ListFiles' >> beam.Create(self._paths)
            | 'ParseFiles'
            >> beam.ParDo(_ReadFileFn(self._root, self._max_doc_chars)).with_outputs(
                'rejected', main='documents'
            )
        )
        resolved = (
            parsed.documents
            | 'KeyByDocId' >> beam.Map(_key_by_doc_id)
            | 'GroupByDocId' >> beam.GroupByKey()
            | 'KeepFirstOfId' >> beam.FlatMap(_resolve_group).with_outputs('rejected', main='documents')
        )
        rejected = (parsed.rejected, resolved.rejected) | 'MergeRejected' >> beam.Flatten()
        return {'documents': resolved.documents, 'rejected': rejected}
