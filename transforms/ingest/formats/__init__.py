"""The input formats: one registry that reading, flag validation and the docs iterate.

Adding a format is one module here (its suffixes, size limit and `extract`)
and one entry in FORMATS.
"""

from __future__ import annotations

import posixpath
from typing import Optional

from transforms.ingest.formats import docx, html, pdf
from transforms.ingest.formats.base import (
    EXTRACTION_FAILED,
    FILE_TOO_LARGE,
    Extracted,
    Format,
    file_hash,
    format_size,
    parquet_inflated_size,
    parse_size,
)

__all__ = ['FORMATS', 'EXTRACTION_FAILED', 'FILE_TOO_LARGE', 'Extracted', 'Format', 'file_hash', 'format_of',
           'resolve_limits', 'formats_table', 'NO_LIMIT']

# Record formats: read.py parses them itself (extract=None), record by record.
TEXT = Format(
    name='text', suffixes=('.txt', '.md'), max_bytes=None,
    extracts='the whole file, which must be UTF-8', metadata='none')
JSONL = Format(
    name='jsonl', suffixes=('.jsonl',), max_bytes=None,
    extracts='one document per line: `id`, `text`', metadata='the record\'s `metadata` object')
# Parquet is compressed: its limit bounds the file and the column data its footer declares once inflated.
PARQUET = Format(
    name='parquet', suffixes=('.parquet',), max_bytes=2 * 10**9,
    extracts='one document per row: `id`, `text` columns', metadata='the row\'s `metadata` (object or JSON text)',
    inflated_size=parquet_inflated_size)

FORMATS: tuple[Format, ...] = (TEXT, JSONL, PARQUET, html.FORMAT, pdf.FORMAT, docx.FORMAT)
# `--max_file_bytes pdf=none` lifts a format's limit.
NO_LIMIT = 'none'

_BY_SUFFIX = {suffix: f for f in FORMATS for suffix in f.suffixes}
_BY_NAME = {f.name: f for f in FORMATS}


def format_of(path: str) -> Optional[Format]:
    """The format of a file by its suffix (case-insensitive), or None when unsupported."""
    return _BY_SUFFIX.get(posixpath.splitext(path)[1].lower())


def resolve_limits(spec: Optional[str] = None) -> dict[str, Optional[int]]:
    """Per-format file size limits: the registry's defaults, overridden by `spec`.

    Args:
      spec: `--max_file_bytes`, e.g. `pdf=50MB,html=10MB,text=1GiB`, or `pdf=none`.

    Returns:
      `{format name: bytes or None}` for every format, in registry order.

    Raises:
      ValueError: For an unknown format name or an invalid size.
    """
    limits = {f.name: f.max_bytes for f in FORMATS}
    for item in (spec or '').split(','):
        if not item.strip():
            continue
        name, sep, size = item.partition('=')
        name = name.strip().lower()
        if not sep or name not in _BY_NAME:
            raise ValueError(
                f'--max_file_bytes: {item.strip()!r} is not FORMAT=SIZE with FORMAT one of {sorted(_BY_NAME)}')
        try:
            limits[name] = None if size.strip().lower() == NO_LIMIT else parse_size(size)
        except ValueError as e:
            raise ValueError(f'--max_file_bytes {name}: {e}') from e
    return limits


def formats_table() -> str:
    """The docs' table of supported formats, as Markdown (see `pipelines.reference`)."""
    lines = ['| format | suffixes | extracted | metadata | default size limit | own rejection reasons |',
             '| --- | --- | --- | --- | --- | --- |']

    def cell(text: str) -> str:
        return text.replace('|', '\\|')

    for f in FORMATS:
        suffixes = ', '.join(f'`{s}`' for s in f.suffixes)
        reasons = ', '.join(f'`{r}`' for r in f.reasons)
        lines.append(f'| `{f.name}` | {suffixes} | {cell(f.extracts)} | {cell(f.metadata)} | '
                     f'{format_size(f.max_bytes)} | {reasons} |')
    return '\n'.join(lines)
