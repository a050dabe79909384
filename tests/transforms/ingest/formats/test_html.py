"""The HTML extractor: main content, headings and encodings, on pages the tests make."""

import pytest

from tests.helpers import BOILERPLATE_PAGE, headings_of
from transforms.ingest.formats import html
from transforms.types import Rejected


def test_html_keeps_main_content_and_headings_and_drops_boilerplate():
    out = html.extract(BOILERPLATE_PAGE.encode('utf-8'), 'page.html')
    assert out.metadata == {'format': 'html', 'title': 'Installing the Widget CLI - Widget Docs'}
    for gone in ('Pricing', 'cookie', 'Copyright', 'dataLayer', 'font-family', 'Privacy'):
        assert gone not in out.text
    assert 'Run pip install widget-cli in a terminal.' in out.text  # inline <code> stays inline
    assert 'System | Supported\nLinux | yes' in out.text
    assert headings_of(out) == [
        (1, 'Installing the Widget CLI'), (2, 'Requirements'), (2, 'Install'), (3, 'Upgrading')]
    assert out.layout.pages is None


def test_html_code_blocks_keep_their_lines():
    page = ('<html><body><article><h1>Scope</h1><p>A scope is the range within a program for which an item '
            'is valid, from its declaration to the end of the block.</p><pre><code>fn main() {\n'
            '    let s = "hello";\n}</code></pre><p>The variable s is valid until the closing brace of '
            'the function body.</p></article></body></html>')
    out = html.extract(page.encode('utf-8'), 'scope.html')
    assert '\n\nfn main() {\n    let s = "hello";\n}\n\n' in out.text


def test_html_honours_meta_charset_latin1():
    page = ('<html><head><meta charset="iso-8859-1"><title>Caf\xe9 cr\xe8me</title></head><body><article>'
            '<h1>Le caf\xe9</h1><p>Un caf\xe9 cr\xe8me se boit le matin, avec une tartine beurr\xe9e '
            'et un journal, \xe0 la terrasse du caf\xe9 du coin.</p></article></body></html>')
    out = html.extract(page.encode('latin-1'), 'cafe.html')
    assert out.metadata['title'] == 'Caf\xe9 cr\xe8me'
    assert 'Un caf\xe9 cr\xe8me se boit le matin' in out.text
    assert headings_of(out) == [(1, 'Le caf\xe9')]


def test_html_bom_wins_and_undeclared_bytes_must_be_utf8():
    body = '<p>Ein Stra\xdfenfest mit M\xfcsli und K\xe4se, das jedes Jahr im Sommer stattfindet.</p>'
    assert html.decode_html(b'\xef\xbb\xbf' + body.encode('utf-8')) == body
    assert html.decode_html(b'\xff\xfe' + body.encode('utf-16-le')) == body
    assert html.decode_html(body.encode('latin-1')) == (html.NOT_UTF8, 'no charset declared and invalid UTF-8 at byte 11')
    reason, detail = html.decode_html(b'<meta charset="utf-8">' + body.encode('latin-1'))
    assert reason == html.HTML_BAD_ENCODING and 'invalid utf-8' in detail
    assert html.decode_html(b'<meta charset="klingon">x')[0] == html.HTML_BAD_ENCODING
    # Latin-1 labels mean windows-1252, as in browsers: 0x93/0x94 are curly quotes.
    assert html.decode_html(b'<meta charset=ISO-8859-1><p>\x93caf\xe9\x94') == '<meta charset=ISO-8859-1><p>\u201ccaf\xe9\u201d'
    xml = '<?xml version="1.0" encoding="iso-8859-15"?><p>50 \u20ac</p>'
    assert html.decode_html(xml.encode('iso-8859-15')) == xml


def test_html_without_content_is_rejected():
    out = html.extract(b'<html><head><title>t</title><script>x()</script></head><body></body></html>', 'e.html')
    assert isinstance(out, Rejected) and out.reason == html.HTML_NO_TEXT


PARAGRAPH = '<p>' + 'Cook the pasta in plenty of salted boiling water until it is al dente. ' * 3 + '</p>'


@pytest.mark.parametrize('charset', ['utf-7', 'undefined', 'punycode', 'idna', 'rot13', 'utf-32'])
def test_a_charset_that_is_no_web_encoding_is_a_bad_encoding(charset):
    page = f'<html><head><meta charset="{charset}"></head><body>{PARAGRAPH}<p>+2D3cAA- after</p></body></html>'
    out = html.extract(page.encode(), 'odd.html')
    assert isinstance(out, Rejected) and out.reason == html.HTML_BAD_ENCODING
    assert f'declared charset {charset} is no encoding of the WHATWG Encoding Standard' == out.detail


def test_web_labels_resolve_to_their_codecs():
    assert [html.web_codec(label) for label in ('UTF-8', 'shift_jis', 'gb2312', 'iso-8859-9', 'utf-7')] == [
        'utf-8', 'shift_jis', 'gbk', 'cp1254', None]


def test_a_page_nested_50000_deep_keeps_its_paragraphs():
    page = ('<html><body>' + '<div>' * 50_000 + PARAGRAPH + '</div>' * 50_000
            + '<p>After the nest, a paragraph about the sauce and the cheese to grate over it.</p></body></html>')
    out = html.extract(page.encode(), 'deep.html')
    assert out.text.startswith('Cook the pasta in plenty') and out.text.endswith('the cheese to grate over it.')


def test_flattening_removes_only_the_tags_of_the_middle_levels():
    page = '<body>' + '<div>' * 10 + '<p>text <b>bold</b></p>' + '</div>' * 10 + '</body>'
    # body and two divs lie at most 3 deep; the last div, p and b hold at most 3 levels.
    kept = '<body><div><div><div><p>text <b>bold</b></p></div></div></div></body>'
    assert html.flatten_nesting(page, kept_levels=3) == kept
    assert html.flatten_nesting(page, kept_levels=20) == page
