"""The DOCX extractor: paragraphs, headings and tables, on Word files the tests make."""

from tests.helpers import docx_with_body, headings_of, make_docx
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


def run(text, tag='w:t'):
    return f'<w:r><{tag} xml:space="preserve">{text}</{tag}></w:r>'


def test_text_inside_revisions_controls_tags_and_fields_is_extracted():
    body = (
        f'<w:p>{run("Kept ")}<w:ins w:id="1" w:author="a">{run("inserted ")}</w:ins>'
        f'<w:del w:id="2" w:author="a">{run("deleted ", "w:delText")}</w:del>{run("end.")}</w:p>'
        f'<w:p><w:sdt><w:sdtPr><w:alias w:val="Name"/></w:sdtPr><w:sdtContent>{run("Inline control")}'
        '</w:sdtContent></w:sdt></w:p>'
        f'<w:sdt><w:sdtContent><w:p>{run("Block control")}</w:p></w:sdtContent></w:sdt>'
        f'<w:p><w:smartTag w:uri="urn:x" w:element="place">{run("Smart tag")}</w:smartTag></w:p>'
        f'<w:p><w:fldSimple w:instr=" DATE "><w:r><w:t>Field result</w:t></w:r></w:fldSimple></w:p>'
        '<w:p><w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText> PAGE </w:instrText></w:r>'
        '<w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>Complex result</w:t></w:r>'
        '<w:r><w:fldChar w:fldCharType="end"/></w:r></w:p>'
        f'<w:p><w:moveFrom w:id="3" w:author="a">{run("Moved")}</w:moveFrom><w:moveTo w:id="4" w:author="a">'
        f'{run("Moved")}</w:moveTo></w:p>'
    )
    out = docx.extract(docx_with_body(body), 'revisions.docx')
    assert out.text.split('\n\n') == ['Kept inserted end.', 'Inline control', 'Block control', 'Smart tag',
                                      'Field result', 'Complex result', 'Moved']


def test_a_nested_table_is_its_cell_and_a_merged_cell_comes_once():
    def cell(content):
        return f'<w:tc>{content}</w:tc>'

    nested = ('<w:tbl>' + ''.join(f'<w:tr>{cell(f"<w:p>{run(a)}</w:p>")}{cell(f"<w:p>{run(b)}</w:p>")}</w:tr>'
                                  for a, b in [('inner a', 'inner b'), ('inner c', 'inner d')]) + '</w:tbl>')
    body = ('<w:tbl><w:tr>' + cell(f'<w:p>{run("Outer")}</w:p>') + cell(f'<w:p>{run("holds")}</w:p>{nested}')
            + '</w:tr><w:tr><w:tc><w:tcPr><w:gridSpan w:val="2"/></w:tcPr>' + f'<w:p>{run("Merged")}</w:p></w:tc>'
            + '</w:tr></w:tbl>')
    out = docx.extract(docx_with_body(body), 'tables.docx')
    assert out.text == 'Outer | holds inner a | inner b; inner c | inner d\nMerged'


def test_a_vertically_merged_cell_is_read_in_every_row_it_spans():
    def row(*cells):
        return '<w:tr>' + ''.join(cells) + '</w:tr>'

    def cell(text, merge=None):
        props = '' if merge is None else f'<w:tcPr><w:vMerge{merge}/></w:tcPr>'
        return f'<w:tc>{props}<w:p>{run(text) if text else ""}</w:p></w:tc>'

    body = ('<w:tbl>' + row(cell('Brakes', ' w:val="restart"'), cell('pads')) + row(cell('', ''), cell('discs'))
            + '</w:tbl>')
    assert docx.extract(docx_with_body(body), 'merged.docx').text == 'Brakes | pads\nBrakes | discs'


def test_an_unresolved_entity_is_kept_as_written_and_the_text_after_it_too():
    doctype = '<!DOCTYPE w:document [<!ENTITY xxe SYSTEM "file:///etc/hostname">]>'
    out = docx.extract(docx_with_body(f'<w:p>{run("XXE: &xxe; end")}</w:p>', doctype=doctype), 'xxe.docx')
    assert out.text == 'XXE: &xxe; end'


def test_a_docx_without_core_properties_has_no_made_up_title():
    body = f'<w:p>{run("Body text.")}</w:p>'
    assert docx.extract(docx_with_body(body), 'core.docx').metadata == {'format': 'docx', 'title': 'Core title'}
    assert docx.extract(docx_with_body(body, core=False), 'bare.docx').metadata == {'format': 'docx'}
