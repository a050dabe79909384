"""Versioned roots: run ids, the LATEST pointer, retention, cleanup and the lock."""

import datetime
import json
import os

import pytest

from transforms.output import snapshots


def make_run(root, run_id, complete=True, finished=None):
    """A run directory; `finished` sets its manifest's time (runs are ordered by it)."""
    directory = root / 'runs' / run_id
    (directory / 'chunks').mkdir(parents=True)
    (directory / 'chunks' / 'part.parquet').write_bytes(b'x')
    if complete:
        (directory / 'manifest.json').write_text(json.dumps({'run_id': run_id}))
        if finished is not None:
            os.utime(directory / 'manifest.json', (finished, finished))
    return directory


def test_run_ids_sort_by_time_and_are_checked():
    early = snapshots.new_run_id(datetime.datetime(2026, 1, 2, 3, 4, 5, 6, datetime.timezone.utc))
    late = snapshots.new_run_id(datetime.datetime(2026, 1, 2, 3, 4, 5, 7, datetime.timezone.utc))
    assert early == '20260102T030405000006Z' and early < late
    assert snapshots.check_run_id('nightly-2026.11.29_1') == 'nightly-2026.11.29_1'
    for bad in ('', '../x', '.hidden', '-x', 'a/b', 'a b'):
        with pytest.raises(ValueError, match='run_id'):
            snapshots.check_run_id(bad)


def test_latest_pointer_and_resolve_index(tmp_path):
    assert snapshots.read_latest(str(tmp_path)) is None
    assert snapshots.resolve_index(str(tmp_path)) == str(tmp_path)  # a plain index directory
    make_run(tmp_path, 'r1')
    snapshots.write_latest(str(tmp_path), 'r1')
    assert (tmp_path / 'LATEST').read_text() == 'r1\n'
    assert snapshots.read_latest(str(tmp_path)) == 'r1'
    assert snapshots.resolve_index(str(tmp_path)) == str(tmp_path / 'runs' / 'r1')
    assert not list(tmp_path.glob('LATEST.tmp-*'))
    make_run(tmp_path, 'r2', complete=False)
    (tmp_path / 'LATEST').write_text('r2\n')
    with pytest.raises(ValueError, match='not a complete run'):
        snapshots.resolve_index(str(tmp_path))


def test_a_corrupt_latest_says_what_it_holds_and_names_no_flag(tmp_path):
    (tmp_path / 'LATEST').write_text('../r1 now\n')
    with pytest.raises(ValueError) as refused:
        snapshots.read_latest(str(tmp_path))
    assert str(refused.value) == (f"{tmp_path}/LATEST is corrupt: it must hold one run id (a run id '../r1 now' must "
                                  'be letters, digits, ".", "_" or "-", starting with a letter or digit)')


def test_clean_debris_deletes_incomplete_runs_and_pointer_temporaries(tmp_path):
    make_run(tmp_path, 'r1')
    make_run(tmp_path, 'r2', complete=False)
    (tmp_path / 'LATEST.tmp-123').write_text('r2')
    assert snapshots.list_runs(str(tmp_path)) == (['r1'], ['r2'])
    deleted = snapshots.clean_debris(str(tmp_path))
    assert sorted(deleted) == sorted([str(tmp_path / 'runs' / 'r2'), str(tmp_path / 'LATEST.tmp-123')])
    assert snapshots.list_runs(str(tmp_path)) == (['r1'], [])
    assert snapshots.clean_debris(str(tmp_path / 'empty')) == []


def test_prune_keeps_the_newest_and_never_the_latest(tmp_path):
    # Ordered by when each run finished, not by name.
    for finished, run_id in enumerate(('nightly-b', 'nightly-a', 'manual', 'nightly-c')):
        make_run(tmp_path, run_id, finished=1_000_000 + finished)
    assert snapshots.list_runs(str(tmp_path)) == (['nightly-b', 'nightly-a', 'manual', 'nightly-c'], [])
    snapshots.write_latest(str(tmp_path), 'nightly-b')  # e.g. rolled back by hand
    assert snapshots.prune_runs(str(tmp_path), 2) == ['nightly-a']
    assert snapshots.list_runs(str(tmp_path)) == (['nightly-b', 'manual', 'nightly-c'], [])
    with pytest.raises(ValueError, match='keep_runs'):
        snapshots.prune_runs(str(tmp_path), 0)


def test_lock_is_exclusive_and_released(tmp_path):
    with snapshots.lock(str(tmp_path)):
        with pytest.raises(ValueError, match='another ragsieve build'):
            with snapshots.lock(str(tmp_path)):
                pass
    with snapshots.lock(str(tmp_path)):
        pass


def test_a_deleted_or_replaced_root_lock_lets_no_second_build_in(tmp_path):
    root = str(tmp_path)
    with snapshots.lock(root) as held:
        (tmp_path / 'runs' / 'a-in-progress').mkdir(parents=True)  # build A's run, no manifest yet
        (tmp_path / 'runs' / 'a-in-progress' / 'part-00000-of-00001.parquet').write_bytes(b'...')
        (tmp_path / snapshots.LOCK_FILE).unlink()
        with pytest.raises(ValueError, match='another ragsieve build is writing to'):
            with snapshots.lock(root):
                snapshots.clean_debris(root)  # never reached: A's run would go as a leftover
        assert (tmp_path / 'runs' / 'a-in-progress').is_dir()
        (tmp_path / 'other').write_text('')
        os.replace(tmp_path / 'other', tmp_path / snapshots.LOCK_FILE)
        with pytest.raises(ValueError, match='another ragsieve build'):
            with snapshots.lock(root):
                pass
        with pytest.raises(ValueError, match=r'deleted or replaced while held.*; this build stops before publishing'):
            snapshots.check_locks([held])  # A stops before it publishes
    with snapshots.lock(root):  # released: the next build gets in
        assert snapshots.clean_debris(root) == [f'{root}/runs/a-in-progress']


def test_a_plain_lock_deleted_while_held_is_noticed_before_publishing(tmp_path):
    output = str(tmp_path / 'index')
    path = snapshots.plain_lock_path(output)
    with snapshots.lock_file(output, path) as held:
        snapshots.check_locks([held, None])  # None: an object store's, which has no lock
        os.unlink(path)
        with snapshots.lock_file(output, path):
            with pytest.raises(ValueError, match='deleted or replaced while held'):
                snapshots.check_locks([held])


def test_a_plain_builds_staging_is_kept_from_the_next_build_when_its_lock_file_is_deleted(tmp_path):
    output = str(tmp_path / 'index')
    path = snapshots.plain_lock_path(output)
    staging = f'{output}.staging-1-2'
    with snapshots.lock_file(output, path), snapshots.hold_staging(staging):  # build A fills its staging
        os.unlink(path)
        with pytest.raises(ValueError, match=r'another ragsieve build is writing to .* \(it holds index\.staging-1-2\)'):
            with snapshots.lock_file(output, path):
                pass  # never reached: clean_staging would delete A's staging
        assert os.path.isdir(staging)
    assert snapshots.staging_in_use(output) is None  # A ended: a leftover the next build may delete
    with snapshots.lock_file(output, path):
        pass


@pytest.mark.parametrize('plain', [False, True])
def test_a_lock_path_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path, plain):
    victim = tmp_path / 'victim.txt'
    victim.write_text('precious')
    root = tmp_path / 'index'
    root.mkdir()
    path = snapshots.plain_lock_path(str(root)) if plain else str(root / snapshots.LOCK_FILE)
    os.symlink(victim, path)
    with pytest.raises(ValueError, match='is a symbolic link'):
        with snapshots.lock_file(str(root), path):
            pass
    assert victim.read_text() == 'precious'


def test_prune_spares_runs_replaced_within_the_grace_period(tmp_path):
    import os

    for finished, run_id in ((1000, 'a'), (2000, 'b'), (2900, 'c')):
        directory = tmp_path / 'runs' / run_id
        directory.mkdir(parents=True)
        (directory / 'manifest.json').write_text('{}')
        os.utime(directory / 'manifest.json', (finished, finished))
    snapshots.write_latest(str(tmp_path), 'c')
    # 'a' was replaced by 'b' 1000 s ago, 'b' by 'c' 100 s ago.
    assert snapshots.prune_runs(str(tmp_path), 1, grace_seconds=600, now=3000) == ['a']
    assert snapshots.list_runs(str(tmp_path))[0] == ['b', 'c']
    assert snapshots.prune_runs(str(tmp_path), 1, grace_seconds=0, now=3000) == ['b']
