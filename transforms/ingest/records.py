"""Checking and converting the fields of one input record: text, id and metadata.

Pure functions, no Beam: `transforms/read.py` maps their findings to the
reason codes of `rejected/` rows.

Metadata is stored as canonical JSON (keys sorted, UTF-8). Values JSON cannot
hold are converted losslessly where a conversion exists, and documented here:

- timestamps, dates and times (Parquet `timestamp`/`date`/`time`) -> ISO 8601
  strings (`datetime.isoformat()`; a zone is kept when the column has one);
- durations -> ISO 8601 durations in seconds (`PT90.000000S`);
- bytes (Parquet `binary`) -> standard base64 strings;
- decimals -> their exact decimal strings (`str(Decimal)`);
- NaN, Infinity, -Infinity floats -> the strings `"NaN"`, `"Infinity"`,
  `"-Infinity"` (JSON has no such numbers; the spellings are JavaScript's).

Anything else that is not plain JSON (deeper than MAX_METADATA_DEPTH, an
unpaired surrogate, a key that is not a string, more than `max_bytes` once
serialized, a number under a recency key that no date can hold: 1e400 and
NaN too) is a `MetadataError`.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import unicodedata
from typing import Any, Optional

DEFAULT_MAX_METADATA_BYTES = 65_536
# Deep enough for any real metadata, far below Python's recursion limit.
MAX_METADATA_DEPTH = 64
# Characters that render as nothing: U+FFFD stands for bytes that were lost.
_INVISIBLE = frozenset('\ufffd')


class MetadataError(ValueError):
    """Metadata that cannot be stored; `too_large` tells a size problem from the others."""

    def __init__(self, message: str, too_large: bool = False):
        super().__init__(message)
        self.too_large = too_large


def surrogate_position(text: str) -> Optional[int]:
    """The index of the first unpaired surrogate in `text`, or None.

    JSON's `\\ud800` escapes decode to such code points; no UTF-8 encoder,
    tokenizer or Parquet writer accepts them.
    """
    try:
        text.encode('utf-8')
    except UnicodeEncodeError as e:
        return e.start
    return None


def is_blank(text: str) -> bool:
    """Whether `text` has no visible character once NFKC-normalized.

    Visible: a letter, digit, punctuation mark, symbol or private-use
    character (Unicode categories L, N, P, S, Co), except U+FFFD. Whitespace,
    controls (NUL...), format characters (zero-width, bidi, BOM) and lone
    combining marks are not: a text made only of them would give chunks of
    no token.
    """
    for c in unicodedata.normalize('NFKC', text):
        category = unicodedata.category(c)
        if (category[0] in 'LNPS' or category == 'Co') and c not in _INVISIBLE:
            return False
    return True


def metadata_json(metadata: Any, max_bytes: int = DEFAULT_MAX_METADATA_BYTES) -> str:
    """The metadata as canonical JSON, converted as the module docstring says.

    Args:
      metadata: A dict (from JSON or a Parquet row).
      max_bytes: Largest accepted size of the JSON, in UTF-8 bytes: it is
        copied into every chunk of the document.

    Raises:
      MetadataError: If it cannot be stored, with the path of the bad value.
    """
    # Before conversion, which turns NaN and Infinity into strings (neutral at query time).
    check_recency(metadata)
    value = _convert(metadata, '', 0)
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False)
    size = len(text.encode('utf-8'))
    if size > max_bytes:
        raise MetadataError(f'metadata is {size} bytes > max_metadata_bytes={max_bytes}', too_large=True)
    return text


def check_recency(metadata: dict) -> None:
    """Refuses a number under a recency key that no date can hold (10**400, 1e400, NaN).

    Queries rank by these keys (see `transforms/retrieval.py`); a string that is
    no date stays neutral there, but a number is meant as POSIX seconds, and
    one rule holds for every number: it must fall in `parse_timestamp`'s range
    (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z), infinities and NaN
    included, whether it came as an integer or a float.

    Raises:
      MetadataError: Naming the key.
    """
    for key in RECENCY_KEYS:
        value = metadata.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and parse_timestamp(value) is None:
            shown = (f'a {len(str(abs(value)))}-digit integer' if isinstance(value, int) and abs(value) > 10**30
                     else repr(value))
            raise MetadataError(f'metadata "{key}" is {shown}: not POSIX seconds of a date in years 1-9999')


def _convert(value: Any, path: str, depth: int) -> Any:
    if depth > MAX_METADATA_DEPTH:
        raise MetadataError(f'metadata is nested deeper than {MAX_METADATA_DEPTH} levels (at {path or "top"})')
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return 'NaN' if math.isnan(value) else ('Infinity' if value > 0 else '-Infinity')
    if isinstance(value, str):
        _check_unicode(value, path)
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise MetadataError(f'metadata key {key!r} at {path or "top"} is not a string')
            _check_unicode(key, path)
            out[key] = _convert(item, f'{path}.{key}' if path else key, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_convert(item, f'{path}[{i}]', depth + 1) for i, item in enumerate(value)]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return _iso_duration(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode('ascii')
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise MetadataError(f'metadata value at {path or "top"} has type {type(value).__name__}, which JSON cannot hold')


def _check_unicode(text: str, path: str) -> None:
    position = surrogate_position(text)
    if position is not None:
        raise MetadataError(f'metadata at {path or "top"} has an unpaired surrogate at character {position}')


def _iso_duration(delta: datetime.timedelta) -> str:
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    sign = '-' if micros < 0 else ''
    seconds, fraction = divmod(abs(micros), 1_000_000)
    return f'{sign}PT{seconds}.{fraction:06d}S'


# Top-level metadata keys read as the document's timestamp, first usable one wins.
RECENCY_KEYS = ('updated_at', 'timestamp', 'date', 'created_at')
# The dates a timestamp may name, in UTC: those `datetime` holds, its first and last instant included.
_MIN_SECONDS = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc).timestamp()
_MAX_SECONDS = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc).timestamp()


def parse_timestamp(value) -> Optional[float]:
    """A metadata value as POSIX seconds, or None if it is not a timestamp.

    Strings are read as ISO-8601 (`2024-05-01`, `2024-05-01T10:00:00Z`,
    offsets); times without a zone are taken as UTC. Numbers are POSIX
    seconds. Either must name an instant from 0001-01-01T00:00:00Z to
    9999-12-31T23:59:59.999999Z, both included (others, NaN and infinities
    too, are no timestamp). Never raises.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            parsed = datetime.datetime.fromisoformat(value.strip())
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=datetime.timezone.utc)
            value = parsed.timestamp()
        except (ValueError, OverflowError):  # not ISO 8601, or a zone that leaves the years 1-9999
            return None
    if isinstance(value, (int, float)):
        # Comparing first: float() of a huge int would raise.
        return float(value) if _MIN_SECONDS <= value <= _MAX_SECONDS else None
    return None
