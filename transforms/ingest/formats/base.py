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
    FILE_TOO_LARGE: ("a file over its format's `--max_file_bytes` limit, rejected without being read whole, or a "
                     'compressed one (DOCX, Parquet, a PDF stream) that would inflate past it, refused before inflating'),
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
      inflated_size: For a compressed format, `inflated_size(data)`: what
        its index declares its contents inflate to (a zip's central
        directory, a Parquet footer), or None when it cannot tell (the
        extractor then rejects the file). The format's size limit bounds
        this too, so a zip bomb is refused before anything is inflated.
    """
    name: str
    suffixes: tuple[str, ...]
    max_bytes: Optional[int]
    extracts: str
    metadata: str
    extract: Optional[Extractor] = None
    reasons: Mapping[str, str] = dataclasses.field(default_factory=dict)
    inflated_size: Optional[Callable[[bytes], Optional[int]]] = None


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


# A title longer than this is cut, with an ellipsis: metadata is copied into every chunk.
MAX_TITLE_CHARS = 1000
ELLIPSIS = '\u2026'


def document_metadata(format_name: str, title, **fields) -> dict:
    """A document's metadata: its format, its title when it has a non-blank one, and `fields`.

    The title's whitespace is collapsed and a title over MAX_TITLE_CHARS is
    cut to that length, its last character an ellipsis: a 200 KB `/Title`
    costs the title's tail, not the document (`metadata_too_large`).
    """
    metadata = {'format': format_name, **fields}
    if isinstance(title, str) and title.strip():
        title = ' '.join(title.split())
        metadata['title'] = title if len(title) <= MAX_TITLE_CHARS else title[:MAX_TITLE_CHARS - 1] + ELLIPSIS
    return metadata


def zip_inflated_size(data: bytes) -> Optional[int]:
    """The sum of the inflated sizes a zip's central directory declares, or None for no zip.

    Python's zipfile never yields more than a member's declared size (a
    member that inflates further fails its CRC), so this bounds what
    reading the members can take.
    """
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return None


def parquet_inflated_size(data: bytes) -> Optional[int]:
    """The uncompressed size of every row group a Parquet footer declares, or None for no Parquet file."""
    import io

    import pyarrow.parquet as pq

    try:
        metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    except Exception:  # pyarrow raises several types for what is no Parquet file; reading rejects it
        return None
    return sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))


def file_hash(data: bytes) -> str:
    """Hex blake2b of a raw file, like the text keys of transforms.text."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()
