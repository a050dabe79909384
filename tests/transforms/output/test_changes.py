"""Change reports between two builds, on hand-made states."""

from tests.helpers import write_tiny_build
from transforms.output import changes
from transforms.output.changes import BuildState


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
