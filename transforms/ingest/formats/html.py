"""HTML pages: the main content (trafilatura), headings kept as lines, `<title>` as metadata."""

from __future__ import annotations

import codecs
import re
from typing import Iterator, Optional, Union

from transforms.ingest.formats.base import Extracted, Format, document_metadata
from transforms.ingest.layout import TextBuilder
from transforms.ingest.records import surrogate_position
from transforms.types import Layout, Rejected

# Reason codes of this format.
HTML_BAD_ENCODING = 'html_bad_encoding'
HTML_NO_TEXT = 'html_no_text'
HTML_TOO_DEEP = 'html_too_deep'
NOT_UTF8 = 'not_utf8'  # the same code read.py gives a text file that is not UTF-8

# The HTML standard's prescan looks for a charset in the first 1024 bytes.
_PRESCAN_BYTES = 1024
_META_CHARSET = re.compile(
    rb'<meta[^>]*?charset\s*=\s*["\']?\s*([A-Za-z0-9_.:-]+)', re.IGNORECASE)
_XML_ENCODING = re.compile(rb'^\s*<\?xml[^>]*?encoding\s*=\s*["\']([A-Za-z0-9_.:-]+)', re.IGNORECASE)
# As browsers do (WHATWG Encoding): pages labelled Latin-1 or ASCII are windows-1252,
# whose 0x80-0x9F are curly quotes and dashes, not control characters.
_WINDOWS_1252_LABELS = frozenset({
    'iso-8859-1', 'iso8859-1', 'iso_8859-1', 'latin1', 'latin-1', 'l1', 'cp819', 'ibm819',
    'ascii', 'us-ascii', 'windows-1252', 'cp1252', 'x-cp1252'})
_BOMS = ((codecs.BOM_UTF8, 'utf-8'), (codecs.BOM_UTF16_LE, 'utf-16-le'), (codecs.BOM_UTF16_BE, 'utf-16-be'))
# The encodings of the WHATWG Encoding Standard, by the name of Python's codec for each:
# the only ones a page may declare. Others Python knows (utf-7, punycode, idna,
# undefined, utf-32...) are no web encoding: a page declaring one is rejected.
_WEB_CODECS = frozenset({
    'utf-8', 'utf-16-le', 'utf-16-be', 'utf-16', 'cp866', 'iso8859-2', 'iso8859-3', 'iso8859-4', 'iso8859-5',
    'iso8859-6', 'iso8859-7', 'iso8859-8', 'iso8859-10', 'iso8859-13', 'iso8859-14', 'iso8859-15', 'iso8859-16',
    'koi8-r', 'koi8-u', 'mac-roman', 'cp874', 'cp1250', 'cp1251', 'cp1252', 'cp1253', 'cp1254', 'cp1255',
    'cp1256', 'cp1257', 'cp1258', 'mac-cyrillic', 'gbk', 'gb18030', 'big5', 'big5hkscs', 'euc_jp', 'iso2022_jp',
    'shift_jis', 'cp932', 'euc_kr', 'cp949'})
# Labels the Encoding Standard maps to another encoding than Python's codec of the same name.
_WEB_ALIASES = {'iso8859-9': 'cp1254', 'iso8859-11': 'cp874', 'gb2312': 'gbk', 'ks_c_5601-1987': 'cp949'}
# libxml2's HTML parser stops at this depth and drops the rest of the page (trafilatura's parser).
_PARSER_MAX_DEPTH = 256
# A page nested deeper keeps its outermost and innermost levels, this many each (see `flatten_nesting`).
_KEPT_LEVELS = 100
_TAG = re.compile(
    r'<!--.*?-->|<(script|style|textarea|title)\b[^>]*>.*?</\1\s*>|<(/?)([A-Za-z][A-Za-z0-9:-]*)\b[^>]*>',
    re.S | re.I)
_VOID = frozenset({'area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'param', 'source',
                   'track', 'wbr'})
_HEADING_LEVEL = re.compile(r'^h([1-6])$')
# Elements of trafilatura's output whose text is one block of ours.
_BLOCKS = frozenset({'p', 'item', 'quote', 'code', 'head', 'row'})
# Descendants that make an element a container of blocks; `code` is not one:
# inside a paragraph it is inline.
_INNER_BLOCKS = frozenset({'p', 'item', 'quote', 'head', 'row', 'list', 'table'})
_WHITESPACE = re.compile(r'\s+')


def decode_html(data: bytes) -> Union[str, tuple[str, str]]:
    """Decodes a page by its BOM, else its `<meta charset>` or XML declaration, else as UTF-8.

    Never with replacement characters: bytes that are invalid in the
    encoding they claim make the page rejected, not silently altered.

    Returns:
      The text, or `(reason, detail)` when it cannot be decoded.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            declared, data = f'BOM {encoding}', data[len(bom):]
            break
    else:
        match = _META_CHARSET.search(data[:_PRESCAN_BYTES]) or _XML_ENCODING.search(data[:_PRESCAN_BYTES])
        encoding = match.group(1).decode('ascii').lower() if match else None
        declared = f'declared charset {encoding}' if encoding else None
        if encoding in _WINDOWS_1252_LABELS:
            encoding = 'cp1252'
        elif encoding is not None:
            encoding = web_codec(encoding)
            if encoding is None:
                return HTML_BAD_ENCODING, f'{declared} is no encoding of the WHATWG Encoding Standard'
    if encoding is None:
        try:
            return data.decode('utf-8')
        except UnicodeDecodeError as e:
            return NOT_UTF8, f'no charset declared and invalid UTF-8 at byte {e.start}'
    try:
        text = data.decode(encoding)
    except UnicodeError as e:  # UnicodeDecodeError, and what stateful codecs raise
        where = f' at byte {e.start}' if isinstance(e, UnicodeDecodeError) else ''
        return HTML_BAD_ENCODING, f'invalid {encoding}{where} ({declared})'
    bad = surrogate_position(text)
    if bad is not None:  # a codec that decodes to what no UTF-8 text can hold: never cut there silently
        return HTML_BAD_ENCODING, f'decodes to an unpaired surrogate at character {bad} ({declared})'
    return text


def web_codec(label: str) -> Optional[str]:
    """Python's codec for an encoding label a page declares, or None when it names no web encoding."""
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    name = _WEB_ALIASES.get(name, name)
    return name if name in _WEB_CODECS else None


def flatten_nesting(html: str, kept_levels: int = _KEPT_LEVELS) -> str:
    """The page with the tags of its middle levels removed where it nests deeper than `2 * kept_levels`.

    An element keeps its tags when it lies at most `kept_levels` deep or
    holds at most `kept_levels` levels below it; the others (50,000 nested
    `<div>`s, say) lose theirs, and their text and content join the
    element around them. The page's text is unchanged. Tags are found with
    a regular expression (comments, scripts and styles skipped), so a `>`
    inside an attribute value may misplace one: it runs only on pages the
    parser would cut otherwise.
    """
    tokens = []  # (start, end, index of its element) of each start and end tag
    depth_of, height_of = [], []
    open_elements: list[list] = []  # [name, element index, height below it]
    open_count: dict[str, int] = {}

    def close_top():
        name, index, height = open_elements.pop()
        open_count[name] -= 1
        height_of[index] = height + 1
        if open_elements:
            open_elements[-1][2] = max(open_elements[-1][2], height + 1)

    for m in _TAG.finditer(html):
        name = m.group(3)
        if name is None or name.lower() in _VOID or m.group(0).endswith('/>'):
            continue
        name = name.lower()
        if not m.group(2):
            index = len(depth_of)
            depth_of.append(len(open_elements) + 1)
            height_of.append(0)
            open_elements.append([name, index, 0])
            open_count[name] = open_count.get(name, 0) + 1
            tokens.append((m.start(), m.end(), index))
        elif open_count.get(name):
            while open_elements[-1][0] != name:
                close_top()
            index = open_elements[-1][1]
            close_top()
            tokens.append((m.start(), m.end(), index))
    while open_elements:
        close_top()
    out, at = [], 0
    for start, end, index in tokens:
        if depth_of[index] > kept_levels and height_of[index] > kept_levels:
            out.append(html[at:start])
            at = end
    out.append(html[at:])
    return ''.join(out)


def at_depth_limit(tree) -> bool:
    """Whether a parsed tree reaches the parser's depth limit, where it dropped the rest of the page."""
    return bool(tree.xpath(f'boolean(//*[count(ancestor::*) >= {_PARSER_MAX_DEPTH - 1}])'))


def _inline_text(element) -> str:
    """The text of an element and its inline children, whitespace collapsed; `<lb/>` is a space."""
    parts = [element.text or '']
    for child in element:
        parts.append(' ' if child.tag == 'lb' else _inline_text(child))
        parts.append(child.tail or '')
    return _WHITESPACE.sub(' ', ''.join(parts)).strip()


def _blocks(element) -> Iterator[tuple[str, str]]:
    """`(tag, text)` of each block of trafilatura's XML body, in reading order."""
    tag = element.tag
    if tag == 'row':
        cells = [_inline_text(cell) for cell in element.iter('cell')]
        yield 'row', ' | '.join(cells)
        return
    if tag == 'code' and not any(child.tag in _INNER_BLOCKS for child in element.iterdescendants()):
        # A code block keeps its lines: collapsing them would glue statements together.
        lines = [line.rstrip() for line in ''.join(element.itertext()).splitlines()]
        yield tag, '\n'.join(lines).strip('\n')
        return
    if tag in _BLOCKS and not any(child.tag in _INNER_BLOCKS for child in element.iterdescendants()):
        yield (element.get('rend', 'h2') if tag == 'head' else tag), _inline_text(element)
        return
    # A container (or a block holding blocks): its loose text is a block of its own.
    if element.text and element.text.strip():
        yield tag, _WHITESPACE.sub(' ', element.text).strip()
    for child in element:
        yield from _blocks(child)
        if child.tail and child.tail.strip():
            yield tag, _WHITESPACE.sub(' ', child.tail).strip()


def _title(tree) -> Optional[str]:
    title = tree.find('.//title')
    return None if title is None else title.text_content()


def extract(data: bytes, path: str) -> Union[Extracted, Rejected]:
    """Extracts the main content of an HTML page.

    Navigation, headers, footers, cookie banners, scripts and styles are
    removed by trafilatura. Each heading becomes a line of its own (so the
    recursive chunker cuts before it) and is recorded in the layout; blocks
    are separated by a blank line, consecutive list items and table rows by a
    newline; a table row is its cells joined by " | "; whitespace is
    collapsed except in code blocks, which keep their lines.

    Args:
      data: The raw file.
      path: The file, for rejected rows.

    Returns:
      The text, with `format`, `title` (the page's `<title>`) and the heading
      offsets; or why it is rejected.
    """
    import trafilatura

    html = decode_html(data)
    if isinstance(html, tuple):
        return Rejected(path, None, *html)
    tree = trafilatura.load_html(html)
    if tree is not None and at_depth_limit(tree):
        # The parser stopped at its depth limit and dropped the rest of the page: flatten, parse again.
        tree = trafilatura.load_html(flatten_nesting(html))
        if tree is not None and at_depth_limit(tree):
            return Rejected(path, None, HTML_TOO_DEEP,
                            f'elements nested deeper than {_PARSER_MAX_DEPTH} levels, even once flattened')
    if tree is None:
        return Rejected(path, None, HTML_NO_TEXT, 'not parseable as HTML')
    title = _title(tree)
    # deduplicate=False: trafilatura's dedup cache is shared across calls, so
    # a page's text would depend on the pages the worker saw before it.
    # with_metadata=False: date extraction compares with today's date.
    result = trafilatura.bare_extraction(
        tree, include_comments=False, include_tables=True, include_images=False,
        include_links=False, include_formatting=False, deduplicate=False, with_metadata=False)
    builder = TextBuilder()
    previous = None
    for tag, text in ([] if result is None or result.body is None else _blocks(result.body)):
        if not text:
            continue
        level = _HEADING_LEVEL.match(tag)
        if level:
            builder.add_heading(int(level.group(1)), text)
        else:
            builder.add(text, '\n' if tag == previous and tag in ('row', 'item') else '\n\n')
        previous = tag
    if not builder.text().strip():
        return Rejected(path, None, HTML_NO_TEXT, 'no main content found')
    return Extracted(builder.text(), document_metadata('html', title), Layout(headings=builder.headings()))


FORMAT = Format(
    name='html',
    suffixes=('.html', '.htm'),
    max_bytes=10 * 10**6,
    extracts='main content (trafilatura): navigation, header, footer, cookie banners, scripts and '
             'styles removed; headings as lines; table rows as cells joined by " | "',
    metadata='`format`, `title` (the `<title>`); per chunk `heading_path`',
    extract=extract,
    reasons={
        HTML_BAD_ENCODING: 'bytes invalid in the encoding its BOM, `<meta charset>` or XML declaration names, '
                           'a charset that is no web encoding (`utf-7`, `punycode`, `undefined`...), or text that '
                           'decodes to unpaired surrogates',
        HTML_NO_TEXT: 'no main content left once navigation, banners and footers are removed',
        HTML_TOO_DEEP: 'elements nested so deep that the parser would drop the rest of the page, even once '
                       'the middle levels are flattened',
    },
)
