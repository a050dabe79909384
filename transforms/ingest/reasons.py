"""Reason codes of Rejected rows (the `reason` column of rejected/), each with what it means."""

from __future__ import annotations

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
INVALID_UNICODE = 'invalid_unicode'
METADATA_TOO_LARGE = 'metadata_too_large'
# A JSONL or Parquet file that parsed but held no record: still one row, so every listed path comes out.
NO_RECORDS = 'no_records'
# Listed paths that are no regular file (see `listing.file_problem`); never opened.
SPECIAL_FILE = 'special_file'
BROKEN_LINK = 'broken_link'
REPEATED_DIRECTORY = 'repeated_directory'

# What each reason means, for the docs (formats add their own: `formats.FORMATS`).
MEANINGS = {
    UNREADABLE: 'the file or directory could not be opened or listed',
    NOT_UTF8: 'text that is not valid UTF-8 (rejected, not decoded with replacement: that would shift offsets)',
    EMPTY_TEXT: 'no visible character (only whitespace, controls, zero-width or bidi marks)',
    MISSING_TEXT: 'a record without a `text`',
    MISSING_ID: 'a record without an `id`',
    INVALID_RECORD: 'a line or row that is not a JSON object / record ragsieve can read',
    INVALID_METADATA: '`metadata` that is no object, nested deeper than 64 levels, or holds no date under a recency key',
    TOO_LARGE: 'a document longer than `--max_doc_chars`',
    DUPLICATE_DOC_ID: 'a second document with an id already read (the first by source path, then line or row, is kept)',
    UNSUPPORTED_TYPE: 'a file of no supported format',
    INVALID_UNICODE: ('unpaired surrogates in a text or an id, or a file name that is not UTF-8 '
                      '(shown with its bad bytes escaped, `bad\\xff.txt`)'),
    METADATA_TOO_LARGE: 'metadata larger than `--max_metadata_bytes` as JSON (it is copied into every chunk)',
    NO_RECORDS: 'a `.jsonl` of blank lines only, or a `.parquet` of zero rows: a file that holds no record',
    SPECIAL_FILE: 'a FIFO, socket or device: never opened',
    BROKEN_LINK: 'a dangling symbolic link or a link loop',
    REPEATED_DIRECTORY: 'a second link to a directory already read',
}
