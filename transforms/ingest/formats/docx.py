"""Word files: paragraphs, headings and tables of the body (python-docx), in document order."""

from __future__ import annotations

import io
import re
from typing import Union

from transforms.ingest.formats.base import Extracted, Format, document_metadata, zip_inflated_size
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


_W = '{http://schemas.openxmlformats.org/wordprocessingml/2006/main}'
_MC = '{http://schemas.openxmlformats.org/markup-compatibility/2006}'
# Subtrees that hold no body text of a paragraph: tracked deletions and the
# old place of moved text, text boxes (a story of their own, like headers),
# the fallback copy of alternate content, field instructions (the field's
# result is read), properties.
_NOT_TEXT = frozenset({_W + 'del', _W + 'moveFrom', _W + 'txbxContent', _MC + 'Fallback', _W + 'instrText',
                       _W + 'delText', _W + 'sdtPr', _W + 'sdtEndPr', _W + 'pPr', _W + 'rPr', _W + 'fldData'})
# What a run's inner elements stand for; `w:t` is its text.
_CHARACTERS = {_W + 'tab': '\t', _W + 'ptab': '\t', _W + 'cr': '\n', _W + 'noBreakHyphen': '-'}
# Block-level wrappers whose children are blocks: content controls, custom XML, tracked moves/insertions.
_BLOCK_WRAPPERS = frozenset({_W + 'sdt', _W + 'sdtContent', _W + 'customXml', _W + 'ins', _W + 'moveTo'})
_NESTED_ROW_SEPARATOR = '; '


def _t_text(element) -> str:
    """A `w:t`'s text; an entity reference (a DTD Word never writes) is kept as written, never resolved."""
    from lxml import etree

    parts = [element.text or '']
    for child in element:
        if isinstance(child, etree._Entity):
            parts.append(child.text)  # '&name;'
        parts.append(child.tail or '')
    return ''.join(parts)


def paragraph_text(paragraph) -> str:
    """The text of a `w:p`, read from every run inside it, in document order.

    Runs inside tracked insertions, content controls, smart tags, custom
    XML, simple fields and hyperlinks count; `_NOT_TEXT` subtrees do not.
    """
    parts = []
    pending = list(reversed(paragraph))
    while pending:
        element = pending.pop()
        tag = element.tag
        if not isinstance(tag, str) or tag in _NOT_TEXT:
            continue
        if tag == _W + 't':
            parts.append(_t_text(element))
        elif tag == _W + 'br':
            parts.append('\n' if element.get(_W + 'type', 'textWrapping') == 'textWrapping' else '')
        elif tag in _CHARACTERS:
            parts.append(_CHARACTERS[tag])
        else:
            pending.extend(reversed(element))
    return ''.join(parts)


def _children(element, wanted: str):
    """The `wanted` children of an element, through content controls and custom XML around them."""
    for child in element:
        if child.tag == wanted:
            yield child
        elif child.tag in _BLOCK_WRAPPERS:
            yield from _children(child, wanted)


def _blocks(element):
    """The `w:p` and `w:tbl` of a body, a cell or a block content control, in document order."""
    for child in element:
        if child.tag in (_W + 'p', _W + 'tbl'):
            yield child
        elif child.tag in _BLOCK_WRAPPERS:
            yield from _blocks(child)


def _cell_text(cell) -> str:
    """A cell's paragraphs and nested tables, whitespace collapsed; a nested table's rows joined by '; '."""
    parts = []
    for block in _blocks(cell):
        if block.tag == _W + 'tbl':
            parts.append(_NESTED_ROW_SEPARATOR.join(row for row in _table_rows(block) if row))
        else:
            parts.append(paragraph_text(block))
    return ' '.join(' '.join(parts).split())


def _int_property(element, path: str, default: int = 1) -> int:
    found = element.find(path)
    try:
        return int(found.get(_W + 'val')) if found is not None else default
    except (TypeError, ValueError):
        return default


def _table_rows(table) -> list[str]:
    """One line per row: its cells joined by " | ".

    A cell spanning columns (`w:gridSpan`) is one `w:tc`, so it comes once;
    the rows a vertically merged cell spans (`w:vMerge`) each repeat its
    text, as python-docx's cells do, so that every row reads whole.
    """
    rows = []
    above: dict[int, object] = {}  # grid column -> the cell holding the text there, in the row above
    for row in _children(table, _W + 'tr'):
        column = _int_property(row, f'{_W}trPr/{_W}gridBefore', 0)
        here, cells = {}, []
        for cell in _children(row, _W + 'tc'):
            merge = cell.find(f'{_W}tcPr/{_W}vMerge')
            root = above.get(column, cell) if merge is not None and merge.get(_W + 'val') != 'restart' else cell
            span = max(1, _int_property(cell, f'{_W}tcPr/{_W}gridSpan'))
            for offset in range(span):
                here[column + offset] = root
            column += span
            if not cells or cells[-1] is not root:
                cells.append(root)
        above = here
        line = CELL_SEPARATOR.join(_cell_text(cell) for cell in cells)
        rows.append(line if line.replace('|', '').strip() else '')
    return rows


def _core_title(document):
    """The title of the core properties, or None when the file has none.

    python-docx makes up a core properties part, titled "Word Document", for
    a file without one: that is not the document's title.
    """
    from docx.opc.constants import RELATIONSHIP_TYPE

    try:
        document.part.package.part_related_by(RELATIONSHIP_TYPE.CORE_PROPERTIES)
    except KeyError:
        return None
    return document.core_properties.title


def extract(data: bytes, path: str) -> Union[Extracted, Rejected]:
    """Extracts the body of a .docx file.

    Paragraphs are separated by a blank line; paragraphs styled "Title" or
    "Heading N" are heading lines recorded in the layout; a table is its
    rows, one line each, cells joined by " | ", a table nested in a cell is
    that cell's rows joined by "; ". A paragraph's text is that of all its
    runs (`paragraph_text`): tracked insertions (not deletions), content
    controls (inline and block), smart tags, custom XML, simple and complex
    fields (their results) and hyperlinks. Headers, footers, footnotes,
    comments and text boxes are not read.

    Args:
      data: The raw file.
      path: The file, for rejected rows.

    Returns:
      The text with `format` and `title` (core properties, when the file has
      them); or why it is rejected (`docx_corrupt`, `docx_no_text`).
    """
    import docx
    from docx.text.paragraph import Paragraph

    builder = TextBuilder()
    try:
        document = docx.Document(io.BytesIO(data))
        body = document.element.body
        for block in _blocks(body):
            if block.tag == _W + 'tbl':
                rows = [row for row in _table_rows(block) if row]
                if rows:
                    builder.add('\n'.join(rows))
                continue
            text = paragraph_text(block).strip()
            if not text:
                continue
            level = _heading_level(Paragraph(block, document._body))
            if level is None:
                builder.add(text)
            else:
                builder.add_heading(level, ' '.join(text.split()))
        title = _core_title(document)
    except Exception as e:  # python-docx raises zip, XML and KeyError types on broken files
        return Rejected(path, None, DOCX_CORRUPT, f'{type(e).__name__}: {e}')
    if not builder.text().strip():
        return Rejected(path, None, DOCX_NO_TEXT, 'no text in the document body')
    return Extracted(builder.text(), document_metadata('docx', title), Layout(headings=builder.headings()))


FORMAT = Format(
    name='docx',
    suffixes=('.docx',),
    max_bytes=50 * 10**6,
    extracts='body paragraphs (every run: tracked insertions, content controls, smart tags, fields), '
             '"Title"/"Heading N" paragraphs as heading lines, tables as one line per row with cells joined '
             'by " | ", nested tables\' rows by "; " (python-docx); not headers, footers, comments, text boxes',
    metadata='`format`, `title` (core properties); per chunk `heading_path`',
    extract=extract,
    inflated_size=zip_inflated_size,
    reasons={
        DOCX_CORRUPT: 'not a Word file python-docx can open',
        DOCX_NO_TEXT: 'no body text',
    },
)
