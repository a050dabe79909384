"""Reading input files into documents; every unusable record becomes a Rejected row."""

from __future__ import annotations

import dataclasses
import io
import json
import posixpath
import time
from typing import Iterable, Iterator, Optional, Union

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms import progress, storage
from transforms.ingest import formats, records
from transforms.ingest.listing import (
    element_path, expand_input, file_problem, file_source, path_element, relative_id)
from transforms.ingest.reasons import (
    DUPLICATE_DOC_ID,
    EMPTY_TEXT,
    INVALID_METADATA,
    INVALID_RECORD,
    INVALID_UNICODE,
    METADATA_TOO_LARGE,
    MISSING_ID,
    MISSING_TEXT,
    NO_RECORDS,
    NOT_UTF8,
    TOO_LARGE,
    UNREADABLE,
    UNSUPPORTED_TYPE,
)
from transforms.ingest.records import DEFAULT_MAX_METADATA_BYTES
from transforms.types import Document, Rejected

TEXT_SUFFIXES = formats.TEXT.suffixes
JSONL_SUFFIX = formats.JSONL.suffixes[0]
PARQUET_SUFFIX = formats.PARQUET.suffixes[0]
DEFAULT_MAX_DOC_CHARS = 5_000_000
UTF8_BOM = b'\xef\xbb\xbf'

Record = Union[Document, Rejected]


def read_file(
    path: str, root: str, max_doc_chars: int = DEFAULT_MAX_DOC_CHARS,
    max_file_bytes: Optional[dict] = None,
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
) -> Iterator[Record]:
    """Parses one input file into documents and rejected records.

    The format comes from the suffix (see `transforms.formats`): `.txt`/`.md`
    give one document; `.jsonl` one per line (`id`, `text`, optional
    `metadata` object); `.parquet` one per row (same columns); HTML, PDF and
    DOCX one document of extracted text each. Bytes that are not UTF-8 are
    rejected, not decoded with replacement: a replaced character would
    silently change the text that offsets point into.

    Args:
      path: The file.
      root: The input root, for relative doc ids.
      max_doc_chars: Longer documents are rejected as `too_large`.
      max_file_bytes: `{format name: limit or None}` (`formats.resolve_limits`);
        a larger file is rejected unread beyond the limit. Default: the
        registry's limits.
      max_metadata_bytes: Documents with larger metadata (as JSON) are
        rejected as `metadata_too_large`.

    Yields:
      `Document` or `Rejected` items, in file order.
    """
    limits = (max_doc_chars, max_metadata_bytes)
    if records.surrogate_position(path) is not None:
        # A file name that is not UTF-8 (Python's surrogateescape): no table can store it as is.
        yield Rejected(file_source(path), None, INVALID_UNICODE, 'the file name is not UTF-8')
        return
    problem = None if storage.is_remote(path) else file_problem(path)
    if problem:
        yield problem
        return
    fmt = formats.format_of(path)
    if fmt is None:
        suffix = posixpath.splitext(path)[1].lower()
        yield Rejected(file_source(path), None, UNSUPPORTED_TYPE, f'unsupported file type {suffix or "(none)"!r}')
        return
    limit = (max_file_bytes if max_file_bytes is not None else formats.resolve_limits()).get(fmt.name)
    try:
        with storage.open_read(path) as f:
            # One byte past the limit tells a too large file without holding it whole.
            data = f.read() if limit is None else f.read(limit + 1)
    except Exception as e:  # any filesystem error means the file is unusable
        yield Rejected(path, None, UNREADABLE, f'{type(e).__name__}: {e}')
        return
    if limit is not None and len(data) > limit:
        yield Rejected(path, relative_id(path, root), formats.FILE_TOO_LARGE,
                       f'larger than the {fmt.name} limit of {limit} bytes (--max_file_bytes)')
        return
    inflated = None if limit is None or fmt.inflated_size is None else fmt.inflated_size(data)
    if inflated is not None and inflated > limit:
        yield Rejected(path, relative_id(path, root), formats.FILE_TOO_LARGE,
                       f'its {len(data)} bytes inflate to {inflated}, over the {fmt.name} limit of {limit} bytes '
                       '(--max_file_bytes): refused before inflating')
        return
    if fmt.extract is not None:
        yield extracted_document(fmt, path, relative_id(path, root), data, *limits)
    elif fmt is formats.TEXT:
        for record in _read_text(path, relative_id(path, root), data, limits):
            yield with_source(record, data)
    elif fmt is formats.JSONL:
        yield from or_no_records(path, _read_jsonl(path, data, limits), 'only blank lines')
    else:
        yield from or_no_records(path, _read_parquet(path, data, limits), 'zero rows')


def or_no_records(path: str, parsed: Iterable[Record], what: str) -> Iterator[Record]:
    """The records of a file of records, or one `no_records` rejection when it held none.

    A file leaves a trace even when it held nothing to index or reject.
    """
    empty = True
    for record in parsed:
        empty = False
        yield record
    if empty:
        yield Rejected(path, None, NO_RECORDS, f'the file holds no record ({what})')


def extracted_document(
    fmt: formats.Format, path: str, doc_id: str, data: bytes, max_doc_chars: int,
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
) -> Record:
    """The document of a whole file of an extracted format (HTML, PDF, DOCX), or why it is rejected."""
    try:
        extracted = fmt.extract(data, path)
    except Exception as e:  # a parser bug on one odd file must not fail the whole build
        return Rejected(path, doc_id, formats.EXTRACTION_FAILED, f'{type(e).__name__}: {e}')
    if isinstance(extracted, Rejected):
        return dataclasses.replace(extracted, doc_id=doc_id)
    record = make_document(path, 0, doc_id, extracted.text, extracted.metadata, max_doc_chars, max_metadata_bytes)
    if isinstance(record, Document):
        record = dataclasses.replace(record, layout=extracted.layout)
    return with_source(record, data)


def with_source(record: Record, data: bytes) -> Record:
    """A whole-file document with its raw file's size and hash; other records unchanged."""
    if not isinstance(record, Document):
        return record
    return dataclasses.replace(record, source_bytes=len(data), source_hash=formats.file_hash(data))


def _decode(source: str, doc_id: Optional[str], data: bytes) -> Union[str, Rejected]:
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError as e:
        return Rejected(source, doc_id, NOT_UTF8, f'invalid UTF-8 at byte {e.start}')


def _read_text(path, doc_id, data, limits) -> Iterator[Record]:
    # Editors on Windows start UTF-8 files with a BOM: a marker, not text (as in .jsonl).
    # source_bytes and source_hash (`with_source`) still describe the file as it is.
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    text = _decode(path, doc_id, data)
    if isinstance(text, Rejected):
        yield text
        return
    yield make_document(path, 0, doc_id, text, None, *limits)


def _read_jsonl(path, data, limits) -> Iterator[Record]:
    # Lines end at b"\n" only: U+2028, U+2029 and U+0085 (which str.splitlines
    # also breaks at) are legal inside JSON strings. Each line is decoded on
    # its own, so one bad byte costs one record, not the file.
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    for line_no, raw in enumerate(data.split(b'\n'), start=1):
        if not raw.strip():
            continue  # blank lines separate nothing and hold no record
        source = f'{path}:{line_no}'
        try:
            line = raw.decode('utf-8')
        except UnicodeDecodeError as e:
            yield Rejected(source, None, NOT_UTF8, f'invalid UTF-8 at byte {e.start} of line {line_no}')
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            yield Rejected(source, None, INVALID_RECORD, f'invalid JSON: {e.msg}')
            continue
        except RecursionError:
            yield Rejected(source, None, INVALID_RECORD, 'invalid JSON: nested too deeply to parse')
            continue
        except ValueError as e:  # e.g. an integer of more than 4300 digits
            yield Rejected(source, None, INVALID_RECORD, f'invalid JSON: {e}')
            continue
        yield from _from_record(path, line_no, record, limits)


def _parquet_rows(table) -> Iterator[Union[dict, Exception]]:
    """The table's rows as dicts; a row pyarrow cannot convert (e.g. a date
    beyond year 9999) is yielded as its exception instead."""
    try:
        yield from table.to_pylist()
        return
    except Exception:  # pyarrow raises several types; find the rows one by one
        pass
    for i in range(table.num_rows):
        try:
            yield table.slice(i, 1).to_pylist()[0]
        except Exception as e:
            yield e


def _read_parquet(path, data, limits) -> Iterator[Record]:
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
    for row_no, record in enumerate(_parquet_rows(table), start=1):
        if isinstance(record, Exception):
            yield Rejected(f'{path}:{row_no}', None, INVALID_RECORD, f'unreadable row: {type(record).__name__}: {record}')
            continue
        yield from _from_record(path, row_no, record, limits)


def _from_record(path, position, record, limits) -> Iterator[Record]:
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
    bad = records.surrogate_position(doc_id)
    if bad is not None:
        # Not reported as the row's doc_id: Parquet cannot store it.
        shown = doc_id.encode('utf-8', 'backslashreplace').decode('ascii', 'backslashreplace')
        yield Rejected(source, None, INVALID_UNICODE, f'"id" {shown[:200]!r} has an unpaired surrogate at character {bad}')
        return
    text = record.get('text')
    if not isinstance(text, str):
        yield Rejected(source, doc_id, MISSING_TEXT, '"text" missing or not a string')
        return
    metadata = record.get('metadata')
    if isinstance(metadata, str):  # Parquet files often carry metadata as JSON text
        try:
            metadata = json.loads(metadata)
        except (ValueError, RecursionError):  # not JSON: kept as text, rejected just below
            pass
    if metadata is not None and not isinstance(metadata, dict):
        yield Rejected(source, doc_id, INVALID_METADATA, '"metadata" must be an object')
        return
    yield make_document(path, position, doc_id, text, metadata, *limits)


def make_document(
    path, position, doc_id, text, metadata, max_doc_chars,
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
) -> Record:
    """Checks a parsed record and returns its Document, or why it is rejected.

    Metadata is converted to canonical JSON by `records.metadata_json`.
    """
    source = f'{path}:{position}' if position else path
    if len(text) > max_doc_chars:
        return Rejected(
            source, doc_id, TOO_LARGE, f'{len(text)} characters > max_doc_chars={max_doc_chars}'
        )
    bad = records.surrogate_position(text)
    if bad is not None:
        return Rejected(source, doc_id, INVALID_UNICODE, f'text has an unpaired surrogate at character {bad}')
    if records.is_blank(text):
        return Rejected(source, doc_id, EMPTY_TEXT,
                        'text has no visible character (only whitespace, control, format or combining ones)')
    meta = None
    if metadata is not None:
        try:
            meta = records.metadata_json(metadata, max_metadata_bytes)
        except records.MetadataError as e:
            return Rejected(source, doc_id, METADATA_TOO_LARGE if e.too_large else INVALID_METADATA, str(e))
    return Document(doc_id=doc_id, text=text, path=path, position=position, metadata=meta)


def resolve_duplicates(doc_id: str, documents: Iterable[Document]) -> Iterator[Record]:
    """Keeps the first document of an id, by (source path, line/row); rejects the rest."""
    ordered = sorted(documents, key=lambda d: (d.path, d.position))
    yield ordered[0]
    for dup in ordered[1:]:
        yield Rejected(dup.source, doc_id, DUPLICATE_DOC_ID, f'doc id already used by {ordered[0].source}')


class _ReadFileFn(beam.DoFn):
    def __init__(self, root: str, max_doc_chars: int, max_file_bytes: Optional[dict] = None,
                 max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES):
        self._root = root
        self._max_doc_chars = max_doc_chars
        self._max_file_bytes = max_file_bytes
        self._max_metadata_bytes = max_metadata_bytes
        self._files = Metrics.counter('read', 'files')
        self._documents = Metrics.counter('read', 'documents')
        self._msecs = Metrics.counter('read', 'msecs')
        self._live = progress.Tally()

    def process(self, element: bytes):
        path = element_path(element)
        self._files.inc()
        started = time.perf_counter()
        parsed = list(read_file(
            path, self._root, self._max_doc_chars, self._max_file_bytes, self._max_metadata_bytes))
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        self._live.count(progress.FILES)
        self._live.count(progress.DOCUMENTS, sum(not isinstance(r, Rejected) for r in parsed))
        for record in parsed:
            if isinstance(record, Rejected):
                Metrics.counter('read', f'rejected_{record.reason}').inc()
                yield beam.pvalue.TaggedOutput('rejected', record)
            else:
                self._documents.inc()
                yield record

    def finish_bundle(self):
        self._live.flush()


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

    def __init__(
        self, pattern: str, max_doc_chars: int = DEFAULT_MAX_DOC_CHARS, max_file_bytes: Optional[dict] = None,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
    ):
        super().__init__()
        if max_doc_chars <= 0:
            raise ValueError(f'max_doc_chars must be > 0, got {max_doc_chars}')
        self._max_file_bytes = formats.resolve_limits() if max_file_bytes is None else dict(max_file_bytes)
        bad = {name: n for name, n in self._max_file_bytes.items() if n is not None and n <= 0}
        if bad:
            raise ValueError(f'max_file_bytes must be > 0, got {bad}')
        if max_metadata_bytes <= 0:
            raise ValueError(f'max_metadata_bytes must be > 0, got {max_metadata_bytes}')
        self._max_metadata_bytes = max_metadata_bytes
        self._root, self._paths = expand_input(pattern)
        if not self._paths:
            raise ValueError(f'--input {pattern!r} matches no file')
        self._max_doc_chars = max_doc_chars

    def expand(self, pbegin):
        parsed = (
            pbegin
            | 'ListFiles' >> beam.Create([path_element(p) for p in self._paths])
            | 'ParseFiles'
            >> beam.ParDo(_ReadFileFn(
                self._root, self._max_doc_chars, self._max_file_bytes, self._max_metadata_bytes)).with_outputs(
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
