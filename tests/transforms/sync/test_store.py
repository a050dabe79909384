"""Store URIs: what each store accepts, one line for what it does not, and lines that carry no secret."""

import pytest

from transforms.sync.store import check_uri, masked, open_store, redact, secrets_of, shown_id


@pytest.mark.parametrize('uri, problem', [
    ('lancedb://', 'names no directory'),
    ('lancedb:///', 'names no directory'),
    ('lancedb:///tmp/x?table=', r'\?table= must name one table'),
    ('lancedb:///tmp/x?table=a&table=b', r'\?table= must name one table'),
    ('lancedb:///tmp/x?table=a-b', 'must be ASCII letters, digits and _'),
    ('lancedb:///tmp/x?tabel=a', r"unknown option\(s\) \['tabel'\]"),
    ('lancedb:///tmp/x?keep_versions=0', 'keep_versions= must be a whole number >= 1'),
    ('milvus:///tmp/a_directory', r'expected milvus://PATH\.db \(Milvus Lite\) or milvus://HOST:PORT'),
    ('milvus:///tmp/x.db?table=123abc', 'must start with a letter or _'),
    ('postgresql://u@h:5432/db?table=' + 'x' * 59, "must fit PostgreSQL's 63 bytes"),
    ('qdrant://localhost:6333', 'unknown store'),
])
def test_a_bad_uri_is_one_line_before_connecting(uri, problem):
    with pytest.raises(ValueError, match=problem) as found:
        check_uri(uri)
    assert '\n' not in str(found.value)


def test_a_file_is_no_store_directory(tmp_path):
    (tmp_path / 'x.db').write_text('not Milvus Lite')
    (tmp_path / 'lance').write_text('not LanceDB')
    with pytest.raises(ValueError, match='is a file, not a Milvus Lite database'):
        check_uri(f'milvus://{tmp_path}/x.db')
    with pytest.raises(ValueError, match='is a file, not a LanceDB directory'):
        check_uri(f'lancedb://{tmp_path}/lance')


@pytest.mark.parametrize('name', ['select', '123abc', 'MixedCase', 'x' * 58])
def test_any_valid_postgresql_table_name_is_taken(name):
    assert open_store(f'postgresql://u@h:5432/db?table={name}').table == name


def test_passwords_are_masked_and_redacted():
    uri = 'postgresql://app:s%40cret@db:5432/rag?table=t&password=other'
    assert masked(uri) == 'postgresql://app:***@db:5432/rag?table=t&password=***'
    assert masked('lancedb:///data/vectors') == 'lancedb:///data/vectors'
    assert set(secrets_of(uri)) == {'s%40cret', 's@cret', 'other'}
    assert redact('failed for app:s@cret and s%40cret, other', secrets_of(uri)) == 'failed for app:*** and ***, ***'
    store = open_store(uri)
    assert 's@cret' not in store.shown and 'cret' not in store.redact(f'dsn {uri}')


def test_ids_from_a_store_are_printed_escaped_and_bounded():
    assert shown_id('doc#1') == 'doc#1'
    assert shown_id('a\nb\x1b[2J') == 'a\\nb\\x1b[2J'
    assert shown_id(None) == 'NULL'
    long = shown_id('é' * 100_000)
    assert long.startswith('é' * 80) and long.endswith('... (100000 characters)') and len(long) < 120
