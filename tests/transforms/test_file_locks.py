"""Lock files that follow no link, write nothing but a regular file of one name, and notice being split."""

import os

import pytest

from transforms import file_locks


def test_a_symlink_at_the_lock_path_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / 'victim.txt'
    victim.write_text('precious')
    (tmp_path / 'x.lock').symlink_to(victim)
    with pytest.raises(file_locks.NotALockFile, match='is a symbolic link') as refused:
        file_locks.try_lock(str(tmp_path / 'x.lock'))
    assert '\n' not in str(refused.value)
    assert victim.read_text() == 'precious'


def test_a_dangling_symlink_creates_nothing(tmp_path):
    (tmp_path / 'x.lock').symlink_to(tmp_path / 'made.txt')
    with pytest.raises(file_locks.NotALockFile):
        file_locks.try_lock(str(tmp_path / 'x.lock'))
    assert not (tmp_path / 'made.txt').exists()


def test_a_hard_link_fifo_or_directory_is_refused(tmp_path):
    victim = tmp_path / 'victim.txt'
    victim.write_text('precious')
    os.link(victim, tmp_path / 'hard.lock')
    with pytest.raises(file_locks.NotALockFile, match='2 names'):
        file_locks.try_lock(str(tmp_path / 'hard.lock'))
    assert victim.read_text() == 'precious'
    os.mkfifo(tmp_path / 'fifo.lock')
    with pytest.raises(file_locks.NotALockFile, match='a FIFO'):
        file_locks.try_lock(str(tmp_path / 'fifo.lock'))  # refused, not waited on
    (tmp_path / 'dir.lock').mkdir()
    with pytest.raises(file_locks.NotALockFile, match='a directory'):
        file_locks.try_lock(str(tmp_path / 'dir.lock'))


def test_an_existing_lock_file_is_not_truncated_by_opening_it(tmp_path):
    path = tmp_path / 'x.lock'
    path.write_text('what the last holder wrote')
    held = file_locks.try_lock(str(path))
    assert path.read_text() == 'what the last holder wrote'
    held.release()


def test_a_second_lock_is_refused_until_released(tmp_path):
    path = str(tmp_path / 'x.lock')
    held = file_locks.try_lock(path)
    assert file_locks.try_lock(path) is None
    held.release()
    file_locks.try_lock(path).release()


@pytest.mark.parametrize('split', ['delete', 'replace'])
def test_the_holder_notices_its_file_deleted_or_replaced(tmp_path, split):
    path = tmp_path / 'x.lock'
    held = file_locks.try_lock(str(path))
    held.check()
    if split == 'delete':
        path.unlink()
    else:
        (tmp_path / 'other').write_text('')
        os.replace(tmp_path / 'other', path)
    # A second process now locks the file the path names: both would hold "the" lock.
    second = file_locks.try_lock(str(path))
    assert second is not None
    with pytest.raises(file_locks.LockLost, match='deleted or replaced while held'):
        held.check()
    second.check()
    held.release()
    second.release()


def test_a_directory_lock_is_exclusive(tmp_path):
    fd = file_locks.lock_directory(str(tmp_path))
    assert fd is not None and fd >= 0
    assert file_locks.lock_directory(str(tmp_path)) is None
    os.close(fd)
    os.close(file_locks.lock_directory(str(tmp_path)))
