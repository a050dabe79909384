"""The PDF extractor: pages and their offsets, passwords and broken files, on PDFs the tests make."""

import re

import pytest

from tests.helpers import PAGE_1, PAGE_2, encrypt_pdf, make_pdf
from transforms.ingest.formats import pdf
from transforms.ingest.formats.base import FILE_TOO_LARGE, MAX_TITLE_CHARS
from transforms.types import Rejected


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


@pytest.mark.parametrize('padding', [b'\x00' * 2048, b' \r\n' * 700, bytes(range(256)) * 8])
def test_padding_after_the_last_eof_marker_is_no_truncation(padding):
    assert pdf.extract(make_pdf([PAGE_1]) + padding, 'padded.pdf').text == PAGE_1


def test_a_revision_cut_before_its_own_eof_marker_is_a_truncation():
    cut = make_pdf([PAGE_1]) + b'7 0 obj\n<< /Type /Page /Parent 2 0 R'
    out = pdf.extract(cut, 'cut.pdf')
    assert out.reason == pdf.PDF_CORRUPT and 'a revision after the last %%EOF' in out.detail


def test_a_title_of_200_kb_is_trimmed_not_the_document_rejected():
    out = pdf.extract(make_pdf([PAGE_1], title='A long title ' * 16_000), 'titled.pdf')
    assert out.text == PAGE_1
    title = out.metadata['title']
    assert len(title) == MAX_TITLE_CHARS and title.endswith('\u2026') and title.startswith('A long title A long')


def test_a_stream_that_inflates_past_pypdfs_limit_is_too_large():
    bomb = make_pdf([PAGE_1], inflated_padding=100 * 10**6)  # ~100 KB deflated
    assert len(bomb) < 200_000
    out = pdf.extract(bomb, 'bomb.pdf')
    assert out.reason == FILE_TOO_LARGE and 'inflates past pypdf' in out.detail
