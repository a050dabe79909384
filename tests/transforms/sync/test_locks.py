"""The lock file of LanceDB and Milvus Lite: held, refused naming its holder, waited for, freed by a killed holder."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import REPO
from transforms.sync import locks
from transforms.sync.store import LockHeld, LockLost, StoreError

HOLD = ('import sys, time\n'
        'from transforms.sync.locks import file_lock\n'
        'with file_lock(sys.argv[1], "the store", 0, "run r9"):\n'
        '    print("held", flush=True)\n'
        '    time.sleep(120)\n')


def holder_process(path):
    """Another process holding the lock at `path`, once it says so."""
    process = subprocess.Popen([sys.executable, '-c', HOLD, str(path)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, 'PYTHONPATH': str(REPO)})
    assert process.stdout.readline().strip() == 'held'
    return process


def test_a_second_sync_is_refused_naming_the_holder(tmp_path):
    path = tmp_path / 'store' / 't.sync-lock'
    with locks.file_lock(str(path), 'lancedb:///x', 0, 'run r1'):
        with pytest.raises(LockHeld) as refused:
            with locks.file_lock(str(path), 'lancedb:///x', 0, 'run r2'):
                pass
    line = str(refused.value)
    assert line.startswith(f'lancedb:///x is being synced by pid {os.getpid()} on host ')
    assert '(run r1)' in line and '--wait SECONDS' in line and '\n' not in line
    with locks.file_lock(str(path), 'lancedb:///x', 0, 'run r2'):  # released
        assert 'run r2' in path.read_text()
    assert path.read_text() == ''  # a released lock names nobody


def test_a_sync_waits_for_the_holder_with_wait(tmp_path, monkeypatch):
    path = str(tmp_path / 't.sync-lock')
    held, waiting = threading.Event(), threading.Event()

    def hold():
        with locks.file_lock(path, 'the store', 0, 'run r1'):
            held.set()
            waiting.wait(60)  # released once the second sync waits for it

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(60)
    with pytest.raises(LockHeld, match=r'after waiting 0\.3 s'):
        with locks.file_lock(path, 'the store', 0.3, 'run r2'):
            pass
    real = locks.retry_until

    def retry_until(take, wait):
        def sleep(seconds):  # the lock was refused, and the sync waits: the holder may go
            waiting.set()
            time.sleep(seconds)
        return real(take, wait, sleep)

    monkeypatch.setattr(locks, 'retry_until', retry_until)
    with locks.file_lock(path, 'the store', 60, 'run r2'):
        assert waiting.is_set()  # it was refused first, then waited
    holder.join()


def test_a_killed_holder_releases_the_lock(tmp_path):
    path = tmp_path / 't.sync-lock'
    holder = holder_process(path)
    with pytest.raises(LockHeld, match=rf'pid {holder.pid} .*\(run r9\)'):
        with locks.file_lock(str(path), 'the store', 0, 'run r1'):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert path.read_text()  # what the killed holder wrote is left, but holds nothing
    with locks.file_lock(str(path), 'the store', 0, 'run r1'):
        pass


def test_a_holder_is_described_escaped():
    record = {'pid': 12, 'host': 'evil\x1b[2J\nhost', 'since': '2026-01-01T00:00:00Z', 'syncing': 'run r1'}
    assert locks.describe_holder(record) == 'pid 12 on host evil\\x1b[2J\\nhost since 2026-01-01T00:00:00Z (run r1)'
    assert locks.describe_holder(None).startswith('another sync')


def test_a_symlink_at_the_lock_path_is_refused_and_the_file_it_names_kept(tmp_path):
    victim = tmp_path / 'victim.txt'
    victim.write_text('precious')
    path = tmp_path / 'store' / 't.sync-lock'
    path.parent.mkdir()
    path.symlink_to(victim)
    with pytest.raises(StoreError, match=r'^lancedb:///x: lock file .* is a symbolic link') as refused:
        with locks.file_lock(str(path), 'lancedb:///x', 0, 'run r1'):
            pass
    assert '\n' not in str(refused.value)
    assert victim.read_text() == 'precious'


def test_a_hard_link_at_the_lock_path_is_refused_and_the_file_kept(tmp_path):
    victim = tmp_path / 'victim.txt'
    victim.write_text('precious')
    os.link(victim, tmp_path / 't.sync-lock')
    with pytest.raises(StoreError, match='hard link'):
        with locks.file_lock(str(tmp_path / 't.sync-lock'), 'the store', 0, 'run r1'):
            pass
    assert victim.read_text() == 'precious'


@pytest.mark.parametrize('split', ['delete', 'replace'])
def test_a_holder_whose_lock_file_was_deleted_or_replaced_stops(tmp_path, split):
    path = tmp_path / 't.sync-lock'
    with locks.file_lock(str(path), 'the store', 0, 'run r1') as held:
        held.check()
        if split == 'delete':
            path.unlink()
        else:
            (tmp_path / 'other').write_text('')
            os.replace(tmp_path / 'other', path)
        with locks.file_lock(str(path), 'the store', 0, 'run r2'):  # a second sync gets in...
            with pytest.raises(LockLost, match='^the store: lock file .* deleted or replaced'):
                held.check()  # ...and the first one stops
    assert held.check() is None  # released: nothing to check


def test_a_commit_section_admits_one_commit_at_a_time_whatever_the_lock_files(tmp_path):
    (tmp_path / 't.sync-lock').write_text('')
    with locks.commit_section(str(tmp_path), 'the store'):
        os.rename(tmp_path / 't.sync-lock', tmp_path / 'renamed-away')  # splits a lock file, not the directory
        with pytest.raises(StoreError, match=r'^the store: another sync has been committing to it for 0 s'):
            with locks.commit_section(str(tmp_path), 'the store', wait=0):
                pass
    with locks.commit_section(str(tmp_path), 'the store', wait=0):
        pass
