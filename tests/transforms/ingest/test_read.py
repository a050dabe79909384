"""Readers: every input kind, every rejection reason, duplicate ids, and hostile JSONL lines and file names."""

import dataclasses
import json
import os
import re

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import GOOD, make_pdf, outcome, read_all, write_jsonl, zip_bomb_docx
from transforms.ingest import formats, read
from transforms.ingest.formats import pdf
from transforms.ingest.reasons import (
    DUPLICATE_DOC_ID,
    EMPTY_TEXT,
    INVALID_METADATA,
    INVALID_RECORD,
    INVALID_UNICODE,
    MISSING_ID,
    MISSING_TEXT,
    NO_RECORDS,
    NOT_UTF8,
    TOO_LARGE,
    UNREADABLE,
    UNSUPPORTED_TYPE,
)
from transforms.types import Document, Rejected


def reasons(records):
    return [(r.source.rsplit('/', 1)[-1], r.reason) for r in records if isinstance(r, Rejected)]


def test_text_file_is_one_document_with_relative_id(corpus_dir):
    root, _ = corpus_dir
    [doc] = read.read_file(f'{root}/sub/orbits.md', str(root))
    assert isinstance(doc, Document)
    assert doc.doc_id == 'sub/orbits.md' and doc.text.startswith('# Orbits') and doc.metadata is None


def test_not_utf8_is_rejected_with_byte_position(corpus_dir):
    root, _ = corpus_dir
    [rejected] = read.read_file(f'{root}/latin1.txt', str(root))
    assert rejected.reason == NOT_UTF8 and 'byte 3' in rejected.detail


# slides.pdf is a bare PDF header: read as a PDF since PDFs are supported, and found corrupt.
@pytest.mark.parametrize('name,reason', [('blank.md', EMPTY_TEXT), ('slides.pdf', pdf.PDF_CORRUPT)])
def test_unusable_files_are_rejected(corpus_dir, name, reason):
    root, _ = corpus_dir
    assert reasons(read.read_file(f'{root}/{name}', str(root))) == [(name, reason)]


def test_unsupported_suffix_is_rejected(tmp_path):
    (tmp_path / 'deck.pptx').write_bytes(b'PK')
    [rejected] = read.read_file(str(tmp_path / 'deck.pptx'), str(tmp_path))
    assert (rejected.reason, rejected.detail) == (UNSUPPORTED_TYPE, "unsupported file type '.pptx'")


def test_extracted_file_is_one_document_with_layout_and_source(tmp_path):
    data = make_pdf(['Apples grow on trees.', 'Pears do too.'])
    (tmp_path / 'fruit.pdf').write_bytes(data)
    [doc] = read.read_file(str(tmp_path / 'fruit.pdf'), str(tmp_path))
    assert (doc.doc_id, doc.text) == ('fruit.pdf', 'Apples grow on trees.\n\nPears do too.')
    assert doc.layout.pages == ((0, 21), (23, 36))
    assert json.loads(doc.metadata) == {'format': 'pdf', 'page_count': 2}
    assert (doc.source_bytes, doc.source_hash) == (len(data), formats.file_hash(data))


def test_text_file_carries_its_source_size_and_hash(corpus_dir):
    root, _ = corpus_dir
    [doc] = read.read_file(f'{root}/pasta.txt', str(root))
    data = (root / 'pasta.txt').read_bytes()
    assert (doc.source_bytes, doc.source_hash, doc.layout) == (len(data), formats.file_hash(data), None)


def test_file_over_its_format_limit_is_rejected_unparsed(tmp_path):
    (tmp_path / 'big.pdf').write_bytes(make_pdf(['x' * 200]))
    limits = formats.resolve_limits('pdf=100B')
    [rejected] = read.read_file(str(tmp_path / 'big.pdf'), str(tmp_path), max_file_bytes=limits)
    assert (rejected.reason, rejected.doc_id) == (formats.FILE_TOO_LARGE, 'big.pdf')
    assert 'pdf limit of 100 bytes' in rejected.detail


def test_a_zip_bomb_is_refused_by_its_inflated_size_before_anything_inflates(tmp_path, monkeypatch):
    (tmp_path / 'bomb.docx').write_bytes(zip_bomb_docx(60 * 10**6))  # ~60 KB that inflate to 60 MB
    assert (tmp_path / 'bomb.docx').stat().st_size < 10**6
    def inflate(*args):
        raise AssertionError('python-docx opened the bomb')

    monkeypatch.setattr('docx.Document', inflate)  # never reached: the central directory tells
    [rejected] = read_all(tmp_path / 'bomb.docx')
    assert (rejected.reason, rejected.doc_id) == (formats.FILE_TOO_LARGE, 'bomb.docx')
    assert re.search(r'inflate to 60\d{6}, over the docx limit of 50000000 bytes', rejected.detail)


def test_a_parquet_file_is_refused_by_the_size_its_footer_declares(tmp_path):
    pq.write_table(pa.table({'id': ['a'], 'text': ['x' * 100_000]}), tmp_path / 'rows.parquet', compression='zstd')
    assert (tmp_path / 'rows.parquet').stat().st_size < 2_000
    [rejected] = read_all(tmp_path / 'rows.parquet', max_file_bytes=formats.resolve_limits('parquet=50KB'))
    assert rejected.reason == formats.FILE_TOO_LARGE and 'over the parquet limit of 50000 bytes' in rejected.detail
    [document] = read_all(tmp_path / 'rows.parquet')
    assert document.doc_id == 'a'


def test_extractor_crash_becomes_a_rejected_row():
    def broken(data, path):
        raise RuntimeError('parser bug')

    fmt = dataclasses.replace(formats.html.FORMAT, extract=broken)
    rejected = read.extracted_document(fmt, 'in/page.html', 'page.html', b'<p>hello</p>', 100)
    assert (rejected.reason, rejected.detail) == (formats.EXTRACTION_FAILED, 'RuntimeError: parser bug')


def test_missing_file_is_unreadable(tmp_path):
    [rejected] = read.read_file(str(tmp_path / 'gone.txt'), str(tmp_path))
    assert rejected.reason == UNREADABLE


def test_jsonl_records_keep_metadata_and_reject_bad_lines(corpus_dir):
    root, _ = corpus_dir
    records = list(read.read_file(f'{root}/records.jsonl', str(root)))
    docs = {r.doc_id: r for r in records if isinstance(r, Document)}
    assert set(docs) == {'j1', 'pasta.txt', '7'}
    assert json.loads(docs['j1'].metadata) == {'lang': 'en'}
    assert docs['j1'].source.endswith('records.jsonl:1')
    assert reasons(records) == [
        ('records.jsonl:2', EMPTY_TEXT),
        ('records.jsonl:3', MISSING_ID),
        ('records.jsonl:4', INVALID_METADATA),
        ('records.jsonl:7', INVALID_RECORD),
    ]


def test_parquet_rows(corpus_dir):
    root, _ = corpus_dir
    records = list(read.read_file(f'{root}/rows.parquet', str(root)))
    assert [r.doc_id for r in records if isinstance(r, Document)] == ['p1']
    assert reasons(records) == [('rows.parquet:2', MISSING_TEXT)]


def test_files_with_no_record_leave_a_no_records_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_jsonl(tmp_path / 'blank.jsonl', ['', '   ', '\t'])
    pq.write_table(pa.table({'id': pa.array([], pa.string()), 'text': pa.array([], pa.string())}),
                   tmp_path / 'none.parquet')
    for name, what in (('blank.jsonl', 'only blank lines'), ('none.parquet', 'zero rows')):
        [rejected] = read_all(tmp_path / name)
        assert (rejected.source, rejected.doc_id, rejected.reason, rejected.detail) == (
            str(tmp_path / name), None, NO_RECORDS, f'the file holds no record ({what})')


@pytest.mark.parametrize('name', ['note.txt', 'note.md'])
def test_a_utf8_bom_is_skipped_in_text_files_as_in_jsonl(tmp_path, name):
    data = b'\xef\xbb\xbfFirst line of a note saved on Windows.'
    (tmp_path / name).write_bytes(data)
    [doc] = read_all(tmp_path / name)
    assert doc.text == 'First line of a note saved on Windows.'
    assert (doc.source_bytes, doc.source_hash) == (len(data), formats.file_hash(data))
    write_jsonl(tmp_path / 'note.jsonl', [b'\xef\xbb\xbf' + json.dumps({'id': 'n', 'text': doc.text}).encode()])
    [from_jsonl] = read_all(tmp_path / 'note.jsonl')
    assert from_jsonl.text == doc.text


def test_parquet_without_text_column_is_rejected(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({'id': ['a']}), tmp_path / 'x.parquet')
    [rejected] = read.read_file(str(tmp_path / 'x.parquet'), str(tmp_path))
    assert rejected.reason == INVALID_RECORD and "'text'" in rejected.detail


def test_too_large_document_is_rejected(corpus_dir):
    root, _ = corpus_dir
    [rejected] = read.read_file(f'{root}/pasta.txt', str(root), max_doc_chars=100)
    assert rejected.reason == TOO_LARGE


def test_duplicate_ids_keep_first_by_path_then_position():
    later = Document('x', 'later', 'b.jsonl', 1)
    first = Document('x', 'first', 'a.jsonl', 9)
    second = Document('x', 'second', 'a.jsonl', 10)
    kept, *rejected = read.resolve_duplicates('x', [later, second, first])
    assert kept is first
    assert [r.source for r in rejected] == ['a.jsonl:10', 'b.jsonl:1']
    assert all(r.reason == DUPLICATE_DOC_ID and 'a.jsonl:9' in r.detail for r in rejected)


def test_read_documents_accounts_for_every_record(corpus_dir):
    root, expected = corpus_dir
    with TestPipeline() as p:
        out = p | read.ReadDocuments(str(root))
        ids = out['documents'] | 'Ids' >> beam.Map(lambda d: d.doc_id)
        rejected = out['rejected'] | 'Reasons' >> beam.Map(lambda r: (r.source[len(str(root)) + 1 :], r.reason))
        assert_that(ids, equal_to(sorted(expected['documents'])), label='CheckDocuments')
        assert_that(rejected, equal_to(sorted(expected['rejected'].items())), label='CheckRejected')


def test_input_matching_nothing_fails_fast(tmp_path):
    with pytest.raises(ValueError, match='matches no file'):
        read.ReadDocuments(str(tmp_path / 'nothing-*.txt'))


# Hostile inputs: each bad record is one rejected row with a reason, never a crash or a loss.


def test_json_nested_100k_deep_is_one_invalid_record(tmp_path):
    deep = '{"id": "deep", "text": "x", "metadata": ' + '[' * 100_000 + ']' * 100_000 + '}'
    f = write_jsonl(tmp_path / 'a.jsonl', [deep, json.dumps(GOOD)])
    records = read_all(f)
    assert outcome(records) == [('1', INVALID_RECORD), ('2', 'good')]
    assert 'nested too deeply' in records[0].detail


def test_integer_of_more_than_4300_digits_is_one_invalid_record(tmp_path):
    huge = '{"id": "big", "text": "fine text", "metadata": {"n": ' + '9' * 5000 + '}}'
    f = write_jsonl(tmp_path / 'a.jsonl', [huge, json.dumps(GOOD)])
    assert outcome(read_all(f)) == [('1', INVALID_RECORD), ('2', 'good')]


def test_line_separators_inside_json_strings_are_not_line_breaks(tmp_path):
    lines = [json.dumps({'id': f'u{i}', 'text': f'one{sep}two'}, ensure_ascii=False)
             for i, sep in enumerate(['\u2028', '\u2029', '\u0085', '\x1c'])]
    f = write_jsonl(tmp_path / 'a.jsonl', lines + [json.dumps(GOOD)])
    records = read_all(f)
    assert outcome(records) == [('1', 'u0'), ('2', 'u1'), ('3', 'u2'), ('4', 'u3'), ('5', 'good')]
    assert records[0].text == 'one\u2028two'


def test_utf8_bom_at_the_start_of_a_jsonl(tmp_path):
    f = write_jsonl(tmp_path / 'a.jsonl', [b'\xef\xbb\xbf' + json.dumps(GOOD).encode(), b'{"id": "b", "text": "two"}'])
    assert outcome(read_all(f)) == [('1', 'good'), ('2', 'b')]


def test_one_bad_byte_rejects_only_its_line(tmp_path):
    lines = [json.dumps({'id': f'r{i}', 'text': f'record number {i}'}).encode() for i in range(1, 21)]
    lines[6] = lines[6].replace(b'record', b'rec\xffrd')
    records = read_all(write_jsonl(tmp_path / 'a.jsonl', lines))
    rejected = [r for r in records if isinstance(r, Rejected)]
    assert [(r.source.rsplit(':', 1)[-1], r.reason) for r in rejected] == [('7', NOT_UTF8)]
    assert 'line 7' in rejected[0].detail
    assert len([r for r in records if isinstance(r, Document)]) == 19


def test_file_name_that_is_not_utf8_is_rejected_with_a_storable_source(tmp_path):
    name = os.fsdecode(b'bad\xff.txt')
    (tmp_path / name).write_text('text')
    [record] = read_all(tmp_path / name)
    assert record.reason == INVALID_UNICODE and record.source.endswith('bad\\xff.txt')


def test_a_file_name_that_is_not_utf8_costs_that_file_only_in_a_pipeline(tmp_path):
    # Beam's string coder cannot carry such a name: the listing travels as bytes.
    (tmp_path / 'good.txt').write_text('A good document.')
    (tmp_path / os.fsdecode(b'bad\xff.txt')).write_text('text')
    with TestPipeline() as p:
        out = p | read.ReadDocuments(str(tmp_path))
        ids = out['documents'] | 'Ids' >> beam.Map(lambda d: d.doc_id)
        rejected = out['rejected'] | 'Reasons' >> beam.Map(lambda r: (r.source[len(str(tmp_path)) + 1 :], r.reason))
        assert_that(ids, equal_to(['good.txt']), label='CheckDocuments')
        assert_that(rejected, equal_to([('bad\\xff.txt', INVALID_UNICODE)]), label='CheckRejected')


def test_a_file_named_like_a_line_of_another_has_a_source_of_its_own(tmp_path):
    write_jsonl(tmp_path / 'c.jsonl', [json.dumps(GOOD)])
    (tmp_path / 'c.jsonl:1').write_text('a file of no supported type, named like line 1 of c.jsonl')
    [line] = read_all(tmp_path / 'c.jsonl')
    [named] = read_all(tmp_path / 'c.jsonl:1')
    assert line.source == f'{tmp_path}/c.jsonl:1'
    assert (named.source, named.reason) == (f'{tmp_path}/c.jsonl\\x3a1', UNSUPPORTED_TYPE)
