"""The DOCX extractor: paragraphs, headings and tables, on Word files the tests make."""

from tests.helpers import headings_of, make_docx
from transforms.ingest.formats import docx


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
