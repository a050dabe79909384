"""The format registry (suffixes, size limits, its docs table) and deterministic extraction by every extractor."""

import pytest

from tests.helpers import BOILERPLATE_PAGE, PAGE_1, PAGE_2, make_docx, make_pdf
from transforms.ingest import formats
from transforms.ingest.formats import docx, html, pdf


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


def test_formats_table_lists_every_format():
    table = formats.formats_table()
    for f in formats.FORMATS:
        assert f'| `{f.name}` |' in table and all(f'`{r}`' in table for r in f.reasons)


def test_same_file_gives_the_same_text_byte_for_byte():
    files = [(html, BOILERPLATE_PAGE.encode('utf-8')), (pdf, make_pdf([PAGE_1, PAGE_2])),
             (docx, make_docx([('heading', 1, 'H'), ('p', PAGE_1)]))]
    for module, data in files:
        first, second = module.extract(data, 'f'), module.extract(data, 'f')
        assert first == second and first.text.encode('utf-8') == second.text.encode('utf-8')
