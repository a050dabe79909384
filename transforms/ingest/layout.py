"""Per-chunk page numbers and heading paths, from a document's Layout and a chunk's offsets."""

from __future__ import annotations

import bisect
import json
from typing import Optional

from transforms.types import Layout

# Keys a chunk's metadata gains from its document's layout.
PAGES_KEY = 'pages'
HEADING_PATH_KEY = 'heading_path'


class TextBuilder:
    """Joins blocks of extracted text, recording where pages and headings start.

    Extractors add blocks in reading order; offsets are into `text()`, so they
    are exact by construction rather than searched for afterwards.
    """

    def __init__(self):
        self._parts: list[str] = []
        self._length = 0
        self._headings: list[tuple[int, int, str]] = []

    @property
    def length(self) -> int:
        """Characters so far."""
        return self._length

    def add(self, block: str, separator: str = '\n\n') -> int:
        """Appends `block` (after `separator` unless it is the first); returns its offset."""
        if self._parts:
            self._parts.append(separator)
            self._length += len(separator)
        offset = self._length
        self._parts.append(block)
        self._length += len(block)
        return offset

    def add_heading(self, level: int, heading: str) -> int:
        """Appends a heading line and records it; returns its offset."""
        offset = self.add(heading)
        self._headings.append((offset, level, heading))
        return offset

    def headings(self) -> tuple[tuple[int, int, str], ...]:
        """`(offset, level, text)` of the headings added, in order."""
        return tuple(self._headings)

    def text(self) -> str:
        """The text built so far."""
        return ''.join(self._parts)


def pages_spanned(pages: tuple[tuple[int, int], ...], start: int, end: int) -> list[int]:
    """Numbers (from 1) of the pages from the one holding `start` to the one holding `end - 1`.

    The separator after a page counts as that page's, so a span's pages do
    not depend on which side of a page break its whitespace was cut; an empty
    page between two spanned ones is listed (it is spanned, it holds nothing).
    """
    if not pages:
        return []
    starts = [p_start for p_start, _ in pages]
    first = max(1, bisect.bisect_right(starts, start))
    last = max(first, bisect.bisect_right(starts, max(start, end - 1)))
    return list(range(first, last + 1))


def heading_path(headings: tuple[tuple[int, int, str], ...], start: int) -> list[str]:
    """The path of the last heading at or before `start`: its ancestors' texts, then its own.

    An ancestor is the nearest earlier heading of a lower level, so an h3
    right after an h1 has the path [h1, h3].
    """
    index = bisect.bisect_right([offset for offset, _, _ in headings], start) - 1
    if index < 0:
        return []
    path = []
    level = headings[index][1] + 1
    for _, heading_level, text in reversed(headings[: index + 1]):
        if heading_level < level:
            path.append(text)
            level = heading_level
    return path[::-1]


def chunk_metadata(document_metadata: Optional[str], layout: Optional[Layout], start: int, end: int) -> Optional[str]:
    """A chunk's metadata: its document's, plus the pages and heading path of `[start, end)`.

    Returns:
      JSON with sorted keys, or `document_metadata` unchanged when there is no layout.
    """
    if layout is None:
        return document_metadata
    metadata = json.loads(document_metadata) if document_metadata else {}
    if layout.pages is not None:
        metadata[PAGES_KEY] = pages_spanned(layout.pages, start, end)
    if layout.headings is not None:
        metadata[HEADING_PATH_KEY] = heading_path(layout.headings, start)
    return json.dumps(metadata, sort_keys=True, ensure_ascii=False)
