"""Hostile records: each bad text, id or metadata is one rejected row with a reason, never a crash or a loss.

Also the recency timestamps read from metadata (`parse_timestamp`).
"""

import datetime
import decimal
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import GOOD, outcome, read_all, write_jsonl
from transforms.ingest.reasons import EMPTY_TEXT, INVALID_METADATA, INVALID_UNICODE, METADATA_TOO_LARGE
from transforms.ingest.records import parse_timestamp
from transforms.types import Document


def test_metadata_nested_deeper_than_the_bound_is_invalid_metadata(tmp_path):
    nested = {'id': 'n', 'text': 'fine text', 'metadata': json.loads('{"a":' * 200 + '1' + '}' * 200)}
    f = write_jsonl(tmp_path / 'a.jsonl', [json.dumps(nested)])
    assert outcome(read_all(f)) == [('1', INVALID_METADATA)]


@pytest.mark.parametrize('record,reason', [
    ('{"id": "s1", "text": "bad \\ud800 text"}', INVALID_UNICODE),
    ('{"id": "bad\\udc00id", "text": "fine text"}', INVALID_UNICODE),
    ('{"id": "s3", "text": "fine text", "metadata": {"k": "\\ud800"}}', INVALID_METADATA),
    ('{"id": "s4", "text": "fine text", "metadata": {"\\udfff": 1}}', INVALID_METADATA),
])
def test_unpaired_surrogates_are_rejected(tmp_path, record, reason):
    f = write_jsonl(tmp_path / 'a.jsonl', [record, json.dumps(GOOD)])
    records = read_all(f)
    assert outcome(records) == [('1', reason), ('2', 'good')]
    # The rejected row itself must be storable (Parquet needs valid UTF-8).
    for r in records:
        for value in (r.source, r.doc_id or '', getattr(r, 'detail', '')):
            value.encode('utf-8')


@pytest.mark.parametrize('text', [
    '\u200b\u200c\u200d', '\u202e\u202d\u2066', '\x00\x01\x07', '\u0301\u0308', '\ufeff\ufeff',
    '\x00 \u200b\n\u0301\ufeff\t', '\ufffd',
])
def test_text_without_a_visible_character_is_empty(tmp_path, text):
    f = write_jsonl(tmp_path / 'a.jsonl', [json.dumps({'id': 'e', 'text': text})])
    assert outcome(read_all(f)) == [('1', EMPTY_TEXT)]


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
    assert outcome(got) == [('1', METADATA_TOO_LARGE), ('2', 'small')]
    assert 'max_metadata_bytes=1000' in got[0].detail


# One rule for every number under a recency key, written as an integer, a float or 1e400:
# POSIX seconds from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z, both included.
@pytest.mark.parametrize('written,kept', [
    ('-62135596800', True), ('-62135596800.0', True), ('253402300799', True), ('1714557600.5', True),
    ('-62135596801', False), ('253402300800.5', False), ('1e20', False), ('1e300', False), ('1e400', False),
    ('-1e400', False), ('Infinity', False), ('NaN', False), (str(10**400), False), (str(-10**400), False),
])
def test_recency_numbers_follow_one_rule_at_build_time(tmp_path, written, kept):
    text = '{"id": "t", "text": "fine", "metadata": {"updated_at": %s}}' % written
    [record] = read_all(write_jsonl(tmp_path / 'a.jsonl', [text]))
    if kept:
        assert isinstance(record, Document) and parse_timestamp(json.loads(record.metadata)['updated_at']) is not None
    else:
        assert record.reason == INVALID_METADATA, record
        assert record.detail.startswith('metadata "updated_at" is ') and 'years 1-9999' in record.detail


def test_the_first_and_last_instants_are_timestamps_as_numbers_and_as_strings():
    first, last = -62135596800, 253402300799.999999
    assert parse_timestamp(first) == parse_timestamp('0001-01-01T00:00:00Z') == float(first)
    assert parse_timestamp(last) == parse_timestamp('9999-12-31T23:59:59.999999Z')
    assert parse_timestamp(first - 1) is None and parse_timestamp('0001-01-01T00:30:00+01:00') is None


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


@pytest.mark.parametrize('value,expected', [
    ('2024-05-01T10:00:00Z', 1714557600.0),
    ('2024-05-01T12:00:00+02:00', 1714557600.0),
    ('2024-05-01T10:00:00', 1714557600.0),  # no zone: UTC
    ('2024-05-01', 1714521600.0),
    (1714557600, 1714557600.0),
    ('yesterday', None),
    ('', None),
    (True, None),
    (None, None),
    ({'y': 2024}, None),
])
def test_parse_timestamp(value, expected):
    assert parse_timestamp(value) == expected
