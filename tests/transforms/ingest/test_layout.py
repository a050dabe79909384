"""Per-chunk page numbers and heading paths, as pure functions."""

import json

import pytest

from transforms.ingest.layout import TextBuilder, chunk_metadata, heading_path, pages_spanned
from transforms.types import Layout

# Three pages, the middle one empty: 'aaaa\n\n\n\nbbbb'.
PAGES = ((0, 4), (6, 6), (8, 12))
HEADINGS = ((0, 1, 'Guide'), (10, 2, 'Install'), (20, 3, 'Linux'), (30, 2, 'Use'), (40, 4, 'Deep'))


@pytest.mark.parametrize('start,end,pages', [
    (0, 4, [1]), (0, 12, [1, 2, 3]), (8, 10, [3]), (2, 9, [1, 2, 3]), (4, 6, [1]), (0, 0, [1]),
])
def test_pages_spanned(start, end, pages):
    assert pages_spanned(PAGES, start, end) == pages


@pytest.mark.parametrize('start,path', [
    (0, ['Guide']), (9, ['Guide']), (10, ['Guide', 'Install']), (25, ['Guide', 'Install', 'Linux']),
    (30, ['Guide', 'Use']), (45, ['Guide', 'Use', 'Deep']),
])
def test_heading_path_is_that_of_the_last_heading_at_or_before_start(start, path):
    assert heading_path(HEADINGS, start) == path


def test_text_before_the_first_heading_has_an_empty_path():
    assert heading_path(((5, 2, 'Late'),), 0) == []


def test_chunk_metadata_merges_document_metadata_with_its_span():
    layout = Layout(pages=PAGES)
    meta = chunk_metadata('{"format": "pdf", "title": "T"}', layout, 2, 9)
    assert json.loads(meta) == {'format': 'pdf', 'title': 'T', 'pages': [1, 2, 3]}
    assert list(json.loads(meta)) == sorted(json.loads(meta))
    assert json.loads(chunk_metadata(None, Layout(headings=HEADINGS), 12, 14)) == {'heading_path': ['Guide', 'Install']}
    assert chunk_metadata('{"lang": "en"}', None, 0, 5) == '{"lang": "en"}'


def test_text_builder_records_exact_offsets():
    builder = TextBuilder()
    builder.add_heading(1, 'Title')
    builder.add('row 1')
    builder.add('row 2', '\n')
    text = builder.text()
    assert text == 'Title\n\nrow 1\nrow 2' and builder.length == len(text)
    assert builder.headings() == ((0, 1, 'Title'),)
