"""Change reports between two builds, on hand-made states and on written tables compared a bucket at a time."""

import random
import tempfile

import pytest

from tests.helpers import flip_pages, write_tiny_build
from transforms.output import changes, tables
from transforms.output.changes import BuildState
from transforms.output.writers import write_parts


def test_diff_states_counts_documents_chunks_and_flipped_decisions():
    old = BuildState(
        documents={'a': 'ha', 'b': 'hb', 'gone': 'hg'},
        chunks={('a#0', 't0'): True, ('a#1', 't1'): False, ('b#0', 'u0'): True, ('gone#0', 'g'): True},
    )
    new = BuildState(
        documents={'a': 'ha', 'b': 'hb2', 'new': 'hn'},
        chunks={('a#0', 't0'): False, ('a#1', 't1'): True, ('b#0', 'u1'): True, ('new#0', 'n'): True},
    )
    report = changes.diff_states(old, new)
    assert report['documents'] == {
        'before': 3, 'after': 3, 'unchanged': 1,
        'added': {'count': 1, 'ids': ['new']},
        'removed': {'count': 1, 'ids': ['gone']},
        'changed': {'count': 1, 'ids': ['b']},
    }
    # b#0 was edited: one chunk removed and one added under the same id.
    assert report['chunks'] == {
        'before': 4, 'after': 4, 'unchanged': 2,
        'added': {'count': 2, 'ids': ['b#0', 'new#0']},
        'removed': {'count': 2, 'ids': ['b#0', 'gone#0']},
    }
    assert report['kept'] == {
        'before': 3, 'after': 3,
        'newly_dropped': {'count': 1, 'ids': ['a#0']},
        'newly_kept': {'count': 1, 'ids': ['a#1']},
    }


def test_first_build_reports_everything_added_and_lists_are_capped():
    many = {(f'd#{i:04d}', 't'): True for i in range(changes.MAX_LISTED + 5)}
    report = changes.diff_states(None, BuildState({'d': 'h'}, many))
    assert report['documents']['added'] == {'count': 1, 'ids': ['d']}
    assert report['chunks']['added']['count'] == changes.MAX_LISTED + 5
    assert len(report['chunks']['added']['ids']) == changes.MAX_LISTED
    assert report['kept'] == {'before': 0, 'after': changes.MAX_LISTED + 5,
                              'newly_dropped': {'count': 0, 'ids': []}, 'newly_kept': {'count': 0, 'ids': []}}


def test_summary_line():
    report = changes.diff_states(BuildState({'a': 'x'}, {('a#0', 't'): True}), BuildState({'a': 'y'}, {('a#0', 'u'): True}))
    report['previous_run'] = 'r1'
    # Misses a filter dropped before their first use are never computed.
    report['cache'] = {'embedding': {'hits': 5, 'misses': 3, 'computed': 1, 'settings_id': 's'}}
    assert changes.summary_line(report) == (
        'Changes since r1: documents +0 -0 ~1; chunks +1 -1; kept 1 → 1 (0 newly dropped, 0 newly kept); '
        'embedding 1 computed / 5 cached')


def test_state_problem_finds_a_damaged_build_before_it_is_read(tmp_path):
    write_tiny_build(tmp_path / 'ok')
    assert changes.state_problem(str(tmp_path / 'ok')) is None
    write_tiny_build(tmp_path / 'old', with_documents=False)  # built before documents/ existed
    assert changes.state_problem(str(tmp_path / 'old')) is None
    assert changes.load_state(str(tmp_path / 'old')).documents == {}

    write_tiny_build(tmp_path / 'junk')
    part = tmp_path / 'junk' / 'documents' / 'part-00001-of-00002.parquet'
    part.write_bytes(b'not parquet')
    assert changes.state_problem(str(tmp_path / 'junk')).startswith(f'{part} is corrupt or unreadable')

    write_tiny_build(tmp_path / 'deleted')
    for part in (tmp_path / 'deleted' / 'chunks').iterdir():
        part.unlink()
    # An empty directory is a missing one, as on an object store, where no directory outlives its files.
    assert changes.state_problem(str(tmp_path / 'deleted')) == f'{tmp_path / "deleted" / "chunks"} is missing'


def write_build(directory, documents, chunks, num_shards=3):
    """A build's documents/, chunks/ and dropped/ tables from `{doc_id: text_key}` and `[(chunk_id, text, kept)]`."""
    def row(schema, **values):
        return {**{name: None for name in schema.names}, **values}

    write_parts([row(tables.DOCUMENT_SCHEMA, doc_id=d, text_key=k) for d, k in documents.items()],
                tables.DOCUMENTS_TABLE, str(directory / tables.DOCUMENTS_DIR), num_shards)
    for spec, schema, keep in ((tables.CHUNKS_TABLE, tables.CHUNK_SCHEMA, True),
                               (tables.DROPPED_TABLE, tables.DROPPED_SCHEMA, False)):
        rows = [row(schema, chunk_id=c, doc_id=c.split('#')[0], text=t) for c, t, kept in chunks if kept == keep]
        write_parts(rows, spec, str(directory / spec.directory), num_shards)
    return str(directory)


def two_builds(tmp_path):
    """Two builds with more than MAX_LISTED of most kinds of change between them."""
    rng = random.Random(7)
    old_docs = {f'd{i:03d}': f'k{i}' for i in range(600)}
    new_docs = {d: (k + 'x' if rng.random() < 0.3 else k) for d, k in old_docs.items() if rng.random() > 0.3}
    new_docs.update({f'n{i:03d}': f'k{i}' for i in range(120)})
    old_chunks = [(f'd{i // 3:03d}#{i % 3}', f'text {i}', rng.random() < 0.6) for i in range(1800)]
    new_chunks = []
    for chunk_id, text, kept in old_chunks:
        if rng.random() < 0.15:
            continue  # removed
        edited = rng.random() < 0.15
        new_chunks.append((chunk_id, text + ' edited' if edited else text, kept != (rng.random() < 0.3)))
    new_chunks += [(f'n{i // 2:03d}#{i % 2}', f'new {i}', rng.random() < 0.5) for i in range(240)]
    # One chunk in both tables of a build: dropped/ is read last, and wins, as in load_state.
    new_chunks += [('d000#0', 'twice', True), ('d000#0', 'twice', False)]
    return write_build(tmp_path / 'old', old_docs, old_chunks), write_build(tmp_path / 'new', new_docs, new_chunks, 5)


@pytest.mark.parametrize('bucket_rows', [7, 100, changes.BUCKET_ROWS])
def test_the_report_in_buckets_is_the_report_in_memory(tmp_path, monkeypatch, bucket_rows):
    old, new = two_builds(tmp_path)
    scratch = tmp_path / 'scratch'
    scratch.mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(scratch))
    expected = changes.diff_states(changes.load_state(old), changes.load_state(new))
    for kind, key in (('documents', 'added'), ('documents', 'removed'), ('documents', 'changed'),
                      ('chunks', 'added'), ('chunks', 'removed'), ('kept', 'newly_dropped'), ('kept', 'newly_kept')):
        assert expected[kind][key]['count'] > changes.MAX_LISTED, (kind, key)
    assert changes.diff_builds(old, new, bucket_rows) == expected
    assert changes.diff_builds(None, new, bucket_rows) == changes.diff_states(None, changes.load_state(new))
    assert list(scratch.iterdir()) == []  # the bucket files are removed


def test_buckets_split_the_rows_by_id_alike_in_both_builds():
    buckets = {changes.bucket_of(f'd{i}#0', 40) for i in range(1000)}
    assert buckets == set(range(40))
    assert changes.bucket_of('d1#0', 40) == changes.bucket_of('d1#0', 40)


def test_a_previous_build_whose_rows_cannot_be_read_is_told_apart(tmp_path):
    old, new = two_builds(tmp_path)
    flip_pages(tmp_path / 'old' / 'chunks' / 'part-00001-of-00003.parquet', 'text')
    with pytest.raises(changes.PreviousUnreadable, match='part-00001-of-00003.parquet is corrupt or unreadable'):
        changes.diff_builds(old, new, 10)
    with pytest.raises(ValueError) as e:
        changes.diff_builds(new, old, 10)
    assert not isinstance(e.value, changes.PreviousUnreadable)
