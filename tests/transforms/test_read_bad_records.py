"""Hostile inputs: each bad record is one rejected row with a reason, never a crash or a loss."""

import datetime
import decimal
import json
import os
import socket

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms import read
from transforms.types import Document, Rejected

GOOD = {'id': 'good', 'text': 'A perfectly ordinary record about pasta.'}


def read_all(path, root=None, **limits):
    return list(read.read_file(str(path), str(root or path.parent), **limits))


def outcome(records):
    """`(position, doc_id or reason)` per record, in file order."""
    return [(r.source.rsplit(':', 1)[-1] if ':' in r.source else '', r.doc_id if isinstance(r, Document) else r.reason)
            for r in records]


def write_jsonl(path, lines):
    path.write_bytes(b'\n'.join(line if isinstance(line, bytes) else line.encode() for line in lines) + b'\n')
    return path


def test_json_nested_100k_deep_is_one_invalid_record(tmp_path):
    deep = '{"id": "deep", "text": "x", "metadata": ' + '[' * 100_000 + ']' * 100_000 + '}'
    f = write_jsonl(tmp_path / 'a.jsonl', [deep, json.dumps(GOOD)])
    records = read_all(f)
    assert outcome(records) == [('1', read.INVALID_RECORD), ('2', 'good')]
    assert 'nested too deeply' in records[0].detail


def test_metadata_nested_deeper_than_the_bound_is_invalid_metadata(tmp_path):
    nested = {'id': 'n', 'text': 'fine text', 'metadata': json.loads('{"a":' * 200 + '1' + '}' * 200)}
    f = write_jsonl(tmp_path / 'a.jsonl', [json.dumps(nested)])
    assert outcome(read_all(f)) == [('1', read.INVALID_METADATA)]


@pytest.mark.parametrize('record,reason', [
    ('{"id": "s1", "text": "bad \\ud800 text"}', read.INVALID_UNICODE),
    ('{"id": "bad\\udc00id", "text": "fine text"}', read.INVALID_UNICODE),
    ('{"id": "s3", "text": "fine text", "metadata": {"k": "\\ud800"}}', read.INVALID_METADATA),
    ('{"id": "s4", "text": "fine text", "metadata": {"\\udfff": 1}}', read.INVALID_METADATA),
])
def test_unpaired_surrogates_are_rejected(tmp_path, record, reason):
    f = write_jsonl(tmp_path / 'a.jsonl', [record, json.dumps(GOOD)])
    records = read_all(f)
    assert outcome(records) == [('1', reason), ('2', 'good')]
    # The rejected row itself must be storable (Parquet needs valid UTF-8).
    for r in records:
        for value in (r.source, r.doc_id or '', getattr(r, 'detail', '')):
            value.encode('utf-8')


def test_integer_of_more_than_4300_digits_is_one_invalid_record(tmp_path):
    huge = '{"id": "big", "text": "fine text", "metadata": {"n": ' + '9' * 5000 + '}}'
    f = write_jsonl(tmp_path / 'a.jsonl', [huge, json.dumps(GOOD)])
    assert outcome(read_all(f)) == [('1', read.INVALID_RECORD), ('2', 'good')]


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
    assert [(r.source.rsplit(':', 1)[-1], r.reason) for r in rejected] == [('7', read.NOT_UTF8)]
    assert 'line 7' in rejected[0].detail
    assert len([r for r in records if isinstance(r, Document)]) == 19


@pytest.mark.parametrize('text', [
    '\u200b\u200c\u200d', '\u202e\u202d\u2066', '\x00\x01\x07', '\u0301\u0308', '\ufeff\ufeff',
    '\x00 \u200b\n\u0301\ufeff\t', '\ufffd',
])
def test_text_without_a_visible_character_is_empty(tmp_path, text):
    f = write_jsonl(tmp_path / 'a.jsonl', [json.dumps({'id': 'e', 'text': text})])
    assert outcome(read_all(f)) == [('1', read.EMPTY_TEXT)]


def test_visible_text_with_invisible_characters_is_kept(tmp_path):
    f = write_jsonl(tmp_path / 'a.jsonl', [json.dumps({'id': 'e', 'text': '\u200bcafe\u0301 \u2603'})])
    assert outcome(read_all(f)) == [('1', 'e')]


def test_metadata_nan_and_infinity_become_strings(tmp_path):
    f = write_jsonl(tmp_path / 'a.jsonl', ['{"id": "m", "text": "fine", "metadata": {"a": NaN, "b": [Infinity, -Infinity]}}'])
    [doc] = read_all(f)
    assert json.loads(doc.metadata) == {'a': 'NaN', 'b': ['Infinity', '-Infinity']}
    assert 'NaN' not in doc.metadata.replace('"NaN"', '')  # strict JSON


def test_metadata_above_max_bytes_is_rejected(tmp_path):
    records = [{'id': 'big', 'text': 'fine', 'metadata': {'blob': 'x' * 2000}}, {'id': 'small', 'text': 'fine',
                                                                              'metadata': {'k': 'v'}}]
    f = write_jsonl(tmp_path / 'a.jsonl', [json.dumps(r) for r in records])
    got = read_all(f, max_metadata_bytes=1000)
    assert outcome(got) == [('1', read.METADATA_TOO_LARGE), ('2', 'small')]
    assert 'max_metadata_bytes=1000' in got[0].detail


@pytest.mark.parametrize('value', [10**400, -10**400, 1e300, float('nan')])
def test_recency_values_no_date_can_hold_are_rejected_at_build_time(tmp_path, value):
    text = json.dumps({'id': 't', 'text': 'fine', 'metadata': {'updated_at': value}})
    [record] = read_all(write_jsonl(tmp_path / 'a.jsonl', [text]))
    if value != value:  # NaN is converted to the string "NaN", which is no date: neutral
        assert isinstance(record, Document)
    else:
        assert record.reason == read.INVALID_METADATA and 'updated_at' in record.detail


def test_parquet_metadata_structs_convert_losslessly(tmp_path):
    when = datetime.datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=datetime.timezone.utc)
    metadata = pa.array([{'ts': when, 'raw': b'\x00\xffbin', 'price': decimal.Decimal('12.3400'),
                          'day': datetime.date(2024, 5, 1), 'ratio': float('nan')}],
                        type=pa.struct([('ts', pa.timestamp('us', tz='UTC')), ('raw', pa.binary()),
                                        ('price', pa.decimal128(10, 4)), ('day', pa.date32()),
                                        ('ratio', pa.float64())]))
    table = pa.table({'id': ['p1'], 'text': ['Saturn has rings.'], 'metadata': metadata})
    pq.write_table(table, tmp_path / 'rows.parquet')
    [doc] = read_all(tmp_path / 'rows.parquet')
    assert json.loads(doc.metadata) == {
        'ts': '2024-05-01T10:00:00.123456+00:00', 'raw': 'AP9iaW4=', 'price': '12.3400',
        'day': '2024-05-01', 'ratio': 'NaN'}


def test_fifo_socket_and_device_are_rejected_without_being_opened(tmp_path, monkeypatch):
    corpus = tmp_path / 'corpus'
    corpus.mkdir()
    os.mkfifo(corpus / 'pipe.txt')
    server = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(corpus)  # a relative name: socket paths are limited to ~100 bytes
    server.bind('sock.md')
    os.symlink('/dev/zero', corpus / 'zero.txt')
    (corpus / 'ok.txt').write_text('A regular file.')
    try:
        root, paths = read.expand_input(str(corpus))
        got = {p.rsplit('/', 1)[-1]: outcome(read.read_file(p, root)) for p in paths}  # would hang on the FIFO
    finally:
        server.close()
    assert got == {'ok.txt': [('', 'ok.txt')], 'pipe.txt': [('', read.SPECIAL_FILE)],
                   'sock.md': [('', read.SPECIAL_FILE)], 'zero.txt': [('', read.SPECIAL_FILE)]}


def test_every_symlink_the_listing_meets_is_accounted_for(tmp_path):
    corpus, elsewhere = tmp_path / 'corpus', tmp_path / 'elsewhere'
    (corpus / 'real').mkdir(parents=True)
    elsewhere.mkdir()
    (corpus / 'real' / 'a.txt').write_text('A file in a real directory.')
    (elsewhere / 'b.txt').write_text('A file reachable only through a linked directory.')
    os.symlink(elsewhere, corpus / 'linked')
    os.symlink(tmp_path / 'missing.txt', corpus / 'dangling.txt')
    os.symlink(corpus / 'loop2.txt', corpus / 'loop1.txt')
    os.symlink(corpus / 'loop1.txt', corpus / 'loop2.txt')
    os.symlink(corpus, corpus / 'real' / 'up')  # a directory loop
    root, paths = read.expand_input(str(corpus))
    got = {read.relative_id(p, root): outcome(read.read_file(p, root))[0][1] for p in paths}
    assert got == {
        'real/a.txt': 'real/a.txt', 'linked/b.txt': 'linked/b.txt',
        'dangling.txt': read.BROKEN_LINK, 'loop1.txt': read.BROKEN_LINK, 'loop2.txt': read.BROKEN_LINK,
        'real/up': read.REPEATED_DIRECTORY,
    }


def test_an_existing_path_with_glob_characters_is_a_path(tmp_path):
    folder = tmp_path / 'dir[1]'
    folder.mkdir()
    (folder / 'a.txt').write_text('Inside a folder with brackets in its name.')
    (tmp_path / 'dir1').mkdir()  # what the glob would match
    root, paths = read.expand_input(str(folder))
    assert root == str(folder) and [read.relative_id(p, root) for p in paths] == ['a.txt']
    root, paths = read.expand_input(str(folder / 'a.txt'))
    assert paths == [str(folder / 'a.txt')]


def test_file_name_that_is_not_utf8_is_rejected_with_a_storable_source(tmp_path):
    name = os.fsdecode(b'bad\xff.txt')
    (tmp_path / name).write_text('text')
    [record] = read_all(tmp_path / name)
    assert record.reason == read.INVALID_UNICODE and record.source.endswith('bad\\xff.txt')
