"""The format registry and the HTML, PDF and DOCX extractors, on files the tests make."""

import re
from pathlib import Path

import pytest

from tests.documents import BOILERPLATE_PAGE, encrypt_pdf, make_docx, make_pdf
from transforms import formats
from transforms.formats import docx, html, pdf
from transforms.formats.base import Extracted
from transforms.types import Rejected

README = Path(__file__).resolve().parents[2] / 'README.md'
PAGE_1 = 'The first page explains how apples are harvested in autumn.'
PAGE_2 = 'The second page explains how pears are stored over winter.'


def headings_of(extracted: Extracted) -> list[tuple[int, str]]:
    """(level, text) of each recorded heading, checked to sit at its offset in the text."""
    for offset, _, text in extracted.layout.headings:
        assert extracted.text[offset:offset + len(text)] == text
        assert offset == 0 or extracted.text[offset - 1] == '\n'
    return [(level, text) for _, level, text in extracted.layout.headings]


# Registry ----------------------------------------------------------------------------


def test_every_suffix_has_one_format_and_every_format_a_limit_entry():
    suffixes = [s for f in formats.FORMATS for s in f.suffixes]
    assert len(suffixes) == len(set(suffixes))
    assert formats.format_of('a/B.PDF') is pdf.FORMAT and formats.format_of('x.htm') is html.FORMAT
    assert formats.format_of('notes.pptx') is None
    assert list(formats.resolve_limits()) == [f.name for f in formats.FORMATS]


def test_max_file_bytes_flag_overrides_defaults():
    limits = formats.resolve_limits('pdf=5MiB, html=2MB,docx=none,text=1000')
    assert (limits['pdf'], limits['html'], limits['docx'], limits['text']) == (5 * 2**20, 2_000_000, None, 1000)
    assert limits['jsonl'] is None


@pytest.mark.parametrize('spec,message', [
    ('pdff=5MB', 'is not FORMAT=SIZE'), ('pdf', 'is not FORMAT=SIZE'),
    ('pdf=0', 'not a positive size'), ('pdf=5TB', 'not a positive size'),
])
def test_max_file_bytes_flag_is_validated(spec, message):
    with pytest.raises(ValueError, match=message):
        formats.resolve_limits(spec)


def test_readme_formats_table_is_the_registry():
    assert formats.formats_table() in README.read_text()


# HTML --------------------------------------------------------------------------------


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


# PDF ---------------------------------------------------------------------------------


def test_pdf_pages_are_separated_and_their_offsets_exact():
    out = pdf.extract(make_pdf([PAGE_1, PAGE_2], title='Fruit'), 'fruit.pdf')
    assert out.text == PAGE_1 + '\n\n' + PAGE_2
    assert [out.text[start:end] for start, end in out.layout.pages] == [PAGE_1, PAGE_2]
    assert out.metadata == {'format': 'pdf', 'page_count': 2, 'title': 'Fruit'}


def test_pdf_empty_page_keeps_its_number():
    out = pdf.extract(make_pdf([PAGE_1, None, PAGE_2]), 'gap.pdf')
    assert out.text == PAGE_1 + '\n\n\n\n' + PAGE_2
    assert [out.text[s:e] for s, e in out.layout.pages] == [PAGE_1, '', PAGE_2]


def test_pdf_with_an_owner_password_only_is_read():
    out = pdf.extract(encrypt_pdf(make_pdf([PAGE_1]), user_password=''), 'owner.pdf')
    assert out.text == PAGE_1


@pytest.mark.parametrize('make,reason,detail', [
    (lambda: encrypt_pdf(make_pdf([PAGE_1, PAGE_2]), 'secret'), pdf.PDF_ENCRYPTED, 'user password'),
    (lambda: make_pdf([None, None]), pdf.PDF_NO_TEXT, 'no text layer in 2 page(s)'),
    (lambda: make_pdf([PAGE_1, PAGE_2])[:300], pdf.PDF_CORRUPT, 'truncated'),
    (lambda: b'%PDF-1.4', pdf.PDF_CORRUPT, 'truncated'),
    (lambda: b'<html>not a pdf</html>', pdf.PDF_CORRUPT, 'no %PDF- header'),
    (lambda: make_pdf([PAGE_1]).replace(b'/Kids', b'/Kidz'), pdf.PDF_CORRUPT, 'no pages'),
    (lambda: re.sub(rb'xref.*startxref', b'startxref', make_pdf([PAGE_1]), flags=re.S).replace(b' obj', b' jbo'),
     pdf.PDF_CORRUPT, ''),
])
def test_unusable_pdfs_are_rejected_with_a_reason(make, reason, detail):
    out = pdf.extract(make(), 'bad.pdf')
    assert isinstance(out, Rejected) and out.reason == reason and detail in out.detail


# DOCX --------------------------------------------------------------------------------


def test_docx_paragraphs_headings_and_table_rows():
    data = make_docx([
        ('heading', 1, 'Brake pads'), ('p', 'Pads wear and must be replaced.'),
        ('heading', 2, 'Types'), ('table', [['Type', 'Lifetime'], ['Organic', 'short'], ['Sintered', 'long']]),
        ('heading', 2, 'Bedding in'), ('p', 'Brake firmly twenty times.'),
    ], title='Bike maintenance')
    out = docx.extract(data, 'bike.docx')
    assert out.text == ('Brake pads\n\nPads wear and must be replaced.\n\nTypes\n\n'
                        'Type | Lifetime\nOrganic | short\nSintered | long\n\nBedding in\n\nBrake firmly twenty times.')
    assert headings_of(out) == [(1, 'Brake pads'), (2, 'Types'), (2, 'Bedding in')]
    assert out.metadata == {'format': 'docx', 'title': 'Bike maintenance'}


def test_docx_heading_styles_based_on_heading_n_are_headings():
    data = make_docx([('styled', 'Report Heading', 'Heading 2', 'Findings'), ('p', 'Nothing broke.'),
                      ('styled', 'Quote Text', 'Normal', 'Not a heading.')])
    out = docx.extract(data, 'report.docx')
    assert headings_of(out) == [(2, 'Findings')]


def test_broken_or_empty_docx_is_rejected():
    assert docx.extract(b'PK\x03\x04 not a zip', 'x.docx').reason == docx.DOCX_CORRUPT
    assert docx.extract(make_docx([('p', '   ')]), 'e.docx').reason == docx.DOCX_NO_TEXT


# Determinism -------------------------------------------------------------------------


def test_same_file_gives_the_same_text_byte_for_byte():
    files = [(html, BOILERPLATE_PAGE.encode('utf-8')), (pdf, make_pdf([PAGE_1, PAGE_2])),
             (docx, make_docx([('heading', 1, 'H'), ('p', PAGE_1)]))]
    for module, data in files:
        first, second = module.extract(data, 'f'), module.extract(data, 'f')
        assert first == second and first.text.encode('utf-8') == second.text.encode('utf-8')
