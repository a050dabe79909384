"""A folder mixing every format builds end to end: each file indexed or rejected, with page and heading metadata."""

import json

import pyarrow.parquet as pq
import pytest

from pipelines.build_index import job as build_index
from tests.helpers import BOILERPLATE_PAGE, encrypt_pdf, make_docx, make_pdf
from transforms.ingest import formats

PAGE_1 = ('Apple trees are pruned in late winter, while they are dormant, so that the cuts heal '
          'quickly once the sap rises in spring.')
PAGE_2 = ('Pears keep for months in a cool, dark cellar if each fruit is wrapped in paper and '
          'checked every week for bruises.')
LATIN1_PAGE = ('<html><head><meta charset="iso-8859-1"><title>Caf\xe9</title></head><body><article>'
               '<h1>Le caf\xe9 cr\xe8me</h1><p>Un caf\xe9 cr\xe8me se boit le matin, avec une tartine '
               'beurr\xe9e et un journal, \xe0 la terrasse du caf\xe9 du coin de la rue.</p>'
               '</article></body></html>')


@pytest.fixture
def mixed_corpus(tmp_path):
    """Every format, good and bad; returns (folder, expected reasons of the rejected files)."""
    root = tmp_path / 'mixed'
    root.mkdir()
    (root / 'guide.md').write_text('# Guide\n\nMarkdown files are read as they are, one document each.')
    (root / 'records.jsonl').write_text(json.dumps({'id': 'r1', 'text': 'A record from a JSON Lines file.'}) + '\n')
    (root / 'page.html').write_text(BOILERPLATE_PAGE)
    (root / 'cafe.html').write_bytes(LATIN1_PAGE.encode('latin-1'))
    report = make_pdf([PAGE_1, PAGE_2], title='Orchard notes')
    (root / 'report.pdf').write_bytes(report)
    (root / 'reexported.pdf').write_bytes(make_pdf([PAGE_2, PAGE_1], title='First export'))
    (root / 'manual.docx').write_bytes(make_docx([
        ('heading', 1, 'Brake pads'), ('p', 'Replace the pads before the backing plate touches the rotor: metal on metal '
              'ruins a rotor within a few kilometres and makes the brake far weaker.'),
        ('heading', 2, 'Types'), ('table', [['Type', 'Lifetime'], ['Organic', 'short'], ['Sintered', 'long']]),
    ]))
    (root / 'secret.pdf').write_bytes(encrypt_pdf(report, 'secret'))
    (root / 'scan.pdf').write_bytes(make_pdf([None]))
    (root / 'truncated.pdf').write_bytes(report[: len(report) // 2])
    (root / 'slides.pptx').write_bytes(b'PK\x03\x04')
    rejected = {'secret.pdf': 'pdf_encrypted', 'scan.pdf': 'pdf_no_text', 'truncated.pdf': 'pdf_corrupt',
                'slides.pptx': 'unsupported_type'}
    return root, rejected


def build(corpus, out, *flags):
    return build_index.run(['--input', str(corpus), '--output', str(out), '--chunk_size', '32',
                            '--filter', 'none', *flags])


def test_mixed_formats_build_with_exact_offsets_pages_and_headings(mixed_corpus, tmp_path):
    corpus, expected_rejected = mixed_corpus
    root = tmp_path / 'root'
    manifest = build(corpus, root, '--versioned', '--run_id', 'r1')
    out = root / 'runs' / 'r1'
    documents = {d['doc_id']: d for d in pq.read_table(out / 'documents').to_pylist()}
    rejected = {r['source'][len(str(corpus)) + 1:]: r['reason'] for r in pq.read_table(out / 'rejected').to_pylist()}
    # No silent loss: every file is indexed or rejected with its reason.
    assert rejected == expected_rejected
    files = {p.name for p in corpus.iterdir()}
    assert set(documents) - {'r1'} | set(rejected) | {'records.jsonl'} == files
    assert manifest['counts']['documents_indexed'] == len(documents) == 7

    chunks = pq.read_table(out / 'chunks').to_pylist()
    for c in chunks:
        assert documents[c['doc_id']]['text'][c['char_start']:c['char_end']] == c['text']
    meta = {(c['doc_id'], c['text']): json.loads(c['metadata'] or 'null') for c in chunks}

    assert meta[('report.pdf', PAGE_1)] == {'format': 'pdf', 'page_count': 2, 'title': 'Orchard notes', 'pages': [1]}
    assert meta[('report.pdf', PAGE_2)]['pages'] == [2]
    assert meta[('reexported.pdf', PAGE_1)]['pages'] == [2]
    report = documents['report.pdf']
    data = (corpus / 'report.pdf').read_bytes()
    assert (report['source_bytes'], report['source_hash']) == (len(data), formats.file_hash(data))
    assert report['text'] == PAGE_1 + '\n\n' + PAGE_2

    page = {text: m for (doc, text), m in meta.items() if doc == 'page.html'}
    requirements = next(m for t, m in page.items() if 'Python 3.10' in t)
    assert requirements['heading_path'] == ['Installing the Widget CLI', 'Requirements']
    assert requirements['title'] == 'Installing the Widget CLI - Widget Docs'
    assert next(m for t, m in page.items() if 'upgrade flag' in t)['heading_path'] == [
        'Installing the Widget CLI', 'Install', 'Upgrading']
    assert not any('cookie' in t or 'Pricing' in t for t in page)
    table = next(m for (doc, t), m in meta.items() if doc == 'manual.docx' and 'Organic | short' in t)
    assert table['heading_path'] == ['Brake pads', 'Types']
    assert 'Un caf\xe9 cr\xe8me se boit le matin' in documents['cafe.html']['text']
    assert all(m is None for (doc, _), m in meta.items() if doc == 'guide.md')  # text files: no layout

    # Nightly rebuild: reexported.pdf gets new bytes (another title) but the same text.
    (corpus / 'reexported.pdf').write_bytes(make_pdf([PAGE_2, PAGE_1], title='Second export'))
    second = build(corpus, root, '--versioned', '--run_id', 'r2')
    assert second['counts']['chunks_embedded'] == 0
    embedding = second['cache']['features']['embedding']
    assert (embedding['hits'], embedding['misses']) == (second['counts']['chunks_before_filters'], 0)
    again = {d['doc_id']: d for d in pq.read_table(root / 'runs' / 'r2' / 'documents').to_pylist()}
    assert {k: v for k, v in again.items() if k != 'reexported.pdf'} == {
        k: v for k, v in documents.items() if k != 'reexported.pdf'}
    assert again['reexported.pdf']['text'] == documents['reexported.pdf']['text']
    assert again['reexported.pdf']['source_hash'] != documents['reexported.pdf']['source_hash']
    rechunked = pq.read_table(root / 'runs' / 'r2' / 'chunks').to_pylist()
    # Its chunks were not embedded again, but carry the new file's metadata.
    assert {json.loads(c['metadata'])['title'] for c in rechunked if c['doc_id'] == 'reexported.pdf'} == {
        'Second export'}
    assert [(c['chunk_id'], c['text'], c['metadata']) for c in rechunked if c['doc_id'] != 'reexported.pdf'] == [
        (c['chunk_id'], c['text'], c['metadata']) for c in chunks if c['doc_id'] != 'reexported.pdf']


@pytest.mark.parametrize('spec,message', [('pdf=10XB', 'not a positive size'), ('xls=1MB', 'is not FORMAT=SIZE')])
def test_bad_max_file_bytes_fails_before_running(mixed_corpus, tmp_path, spec, message):
    corpus, _ = mixed_corpus
    with pytest.raises(ValueError, match=message):
        build(corpus, tmp_path / 'out', '--max_file_bytes', spec)
    assert not (tmp_path / 'out').exists()


def test_max_file_bytes_flag_reaches_the_readers(mixed_corpus, tmp_path):
    corpus, _ = mixed_corpus
    manifest = build(corpus, tmp_path / 'out', '--max_file_bytes', 'pdf=100B,html=none')
    assert manifest['config']['max_file_bytes']['pdf'] == 100
    assert manifest['config']['max_file_bytes']['html'] is None
    rejected = pq.read_table(tmp_path / 'out' / 'rejected').to_pylist()
    assert {r['source'].rsplit('/', 1)[1] for r in rejected if r['reason'] == formats.FILE_TOO_LARGE} == {
        'report.pdf', 'reexported.pdf', 'secret.pdf', 'scan.pdf', 'truncated.pdf'}
