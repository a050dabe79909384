"""Word files: paragraphs, headings and tables of the body (python-docx), in document order."""

from __future__ import annotations

import io
import re
from typing import Union

from transforms.ingest.formats.base import Extracted, Format, document_metadata
from transforms.ingest.layout import TextBuilder
from transforms.types import Layout, Rejected

# Reason codes of this format.
DOCX_CORRUPT = 'docx_corrupt'
DOCX_NO_TEXT = 'docx_no_text'

CELL_SEPARATOR = ' | '
_HEADING_STYLE = re.compile(r'^Heading ([1-9])$')
# The "Title" style sits above "Heading 1" in a heading path.
_TITLE_LEVEL = 0


def _heading_level(paragraph) -> Union[int, None]:
    """The heading level of a paragraph's style or of the style it is based on, else None.

    Templates often define their own heading styles based on "Heading N".
    """
    style = paragraph.style
    seen = set()
    while style is not None and style.style_id not in seen:
        seen.add(style.style_id)
        if style.name == 'Title':
            return _TITLE_LEVEL
        match = _HEADING_STYLE.match(style.name or '')
        if match:
            return int(match.group(1))
        style = style.base_style
    return None


def _row_text(row) -> str:
    cells, seen = [], set()
    for cell in row.cells:
        # A merged cell is returned once per grid column it covers.
        if id(cell._tc) in seen:
            continue
        seen.add(id(cell._tc))
        cells.append(' '.join(cell.text.split()))
    return CELL_SEPARATOR.join(cells)


def extract(data: bytes, path: str) -> Union[Extracted, Rejected]:
    """Extracts the body of a .docx file.

    Paragraphs are separated by a blank line; paragraphs styled "Title" or
    "Heading N" are heading lines recorded in the layout; a table is its
    rows, one line each, cells joined by " | ". Headers, footers, comments
    and text boxes are not read.

    Args:
      data: The raw file.
      path: The file, for rejected rows.

    Returns:
      The text with `format` and `title` (core properties, when set); or why
      it is rejected (`docx_corrupt`, `docx_no_text`).
    """
    import docx
    from docx.table import Table

    builder = TextBuilder()
    try:
        document = docx.Document(io.BytesIO(data))
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                rows = [_row_text(row) for row in block.rows]
                rows = [row for row in rows if row.replace('|', '').strip()]
                if rows:
                    builder.add('\n'.join(rows))
                continue
            text = block.text.strip()
            if not text:
                continue
            level = _heading_level(block)
            if level is None:
                builder.add(text)
            else:
                builder.add_heading(level, ' '.join(text.split()))
        title = document.core_properties.title
    except Exception as e:  # python-docx raises zip, XML and KeyError types on broken files
        return Rejected(path, None, DOCX_CORRUPT, f'{type(e).__name__}: {e}')
    if not builder.text().strip():
        return Rejected(path, None, DOCX_NO_TEXT, 'no text in the document body')
    return Extracted(builder.text(), document_metadata('docx', title), Layout(headings=builder.headings()))


FORMAT = Format(
    name='docx',
    suffixes=('.docx',),
    max_bytes=50 * 10**6,
    extracts='body paragraphs, "Title"/"Heading N" paragraphs as heading lines, tables as one line '
             'per row with cells joined by " | " (python-docx); not headers, footers, comments',
    metadata='`format`, `title` (core properties); per chunk `heading_path`',
    extract=extract,
    reasons={
        DOCX_CORRUPT: 'not a Word file python-docx can open',
        DOCX_NO_TEXT: 'no body text',
    },
)
