"""The PDF extractor: pages and their offsets, passwords and broken files, on PDFs the tests make."""

import re

import pytest

from tests.helpers import PAGE_1, PAGE_2, encrypt_pdf, make_pdf
from transforms.ingest.formats import pdf
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
