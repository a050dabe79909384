"""What an input format declares: its suffixes, its size limit, and how its text is extracted."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Callable, Mapping, Optional, Union

from transforms.types import Layout, Rejected

FILE_TOO_LARGE = 'file_too_large'
EXTRACTION_FAILED = 'extraction_failed'
# The reasons every extracted format shares, and what they mean.
MEANINGS = {
    FILE_TOO_LARGE: "a file over its format's `--max_file_bytes` limit, rejected without being read whole",
    EXTRACTION_FAILED: 'its extractor raised on an odd file (a parser bug): that file is rejected, not the build',
}

_SIZE = re.compile(r'^\s*(\d+)\s*([KMG]i?B|B)?\s*$', re.IGNORECASE)
_UNITS = {'': 1, 'B': 1, 'KB': 10**3, 'MB': 10**6, 'GB': 10**9, 'KIB': 2**10, 'MIB': 2**20, 'GIB': 2**30}


@dataclasses.dataclass(frozen=True)
class Extracted:
    """The text of a whole-file document, with what the format tells about it.

    Attributes:
      text: The extracted text; chunk offsets index into it.
      metadata: Document metadata (JSON-serializable), e.g. `format`, `title`.
      layout: Where pages and headings are in `text`.
    """
    text: str
    metadata: dict
    layout: Layout


Extractor = Callable[[bytes, str], Union[Extracted, Rejected]]


@dataclasses.dataclass(frozen=True)
class Format:
    """One input format.

    Attributes:
      name: Short name, used by --max_file_bytes (`pdf=50MB`).
      suffixes: Lower-case file suffixes, with the dot.
      max_bytes: Default limit on a file's size, None for none.
      extracts: What becomes text (one line for the README).
      metadata: What metadata documents and chunks get (one line for the README).
      extract: `extract(data, path) -> Extracted | Rejected` for whole-file
        formats; None for the record formats that read.py parses itself.
      reasons: Rejection reasons only this format produces, with what each means.
    """
    name: str
    suffixes: tuple[str, ...]
    max_bytes: Optional[int]
    extracts: str
    metadata: str
    extract: Optional[Extractor] = None
    reasons: Mapping[str, str] = dataclasses.field(default_factory=dict)


def parse_size(value: str) -> int:
    """`'50MB'` -> 50_000_000; KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024.

    Raises:
      ValueError: If `value` is not a positive size.
    """
    match = _SIZE.match(value)
    if not match or int(match.group(1)) <= 0:
        raise ValueError(f'{value!r} is not a positive size like 500000, 10MB or 1GiB')
    return int(match.group(1)) * _UNITS[(match.group(2) or '').upper()]


def format_size(n: Optional[int]) -> str:
    """The shortest exact spelling of a size, for messages and the README."""
    if n is None:
        return 'none'
    for unit in ('GB', 'MB', 'KB', 'GiB', 'MiB', 'KiB'):
        if n % _UNITS[unit.upper()] == 0:
            return f'{n // _UNITS[unit.upper()]}{unit}'
    return f'{n}B'


def document_metadata(format_name: str, title, **fields) -> dict:
    """A document's metadata: its format, its title when it has a non-blank one, and `fields`."""
    metadata = {'format': format_name, **fields}
    if isinstance(title, str) and title.strip():
        metadata['title'] = ' '.join(title.split())
    return metadata


def file_hash(data: bytes) -> str:
    """Hex blake2b of a raw file, like the text keys of transforms.text."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()
