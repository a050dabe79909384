"""Exclusive `flock` locks on local files that follow no link and that no file operation can split.

A `flock` is taken on an inode, not on a path: once someone deletes or
renames the lock file, a second process creates a new file at the path and
gets a lock of its own. So a lock is held only once the path is checked to
still name the inode locked (`HeldFile.check`), and its holder checks again
before each step a second holder would break. The file is opened without
following a link and without truncating (`O_NOFOLLOW`, no `O_TRUNC`), and
must be a regular file of one link: a lock path pointing elsewhere would
otherwise let whoever can write its directory have the holder write over
any file it can write.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Optional

# A path replaced between open and flock, again and again: give up rather than spin.
_REOPENS = 5


class NotALockFile(ValueError):
    """The lock path names a link, a directory, a device, a file with other names: refused, never written."""


class LockLost(ValueError):
    """The lock file was deleted or replaced while held: another process may hold a lock of its own there."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'), (stat.S_ISSOCK, 'a socket'),
                       (stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device'),
                       (stat.S_ISLNK, 'a symbolic link')):
        if test(mode):
            return name
    return 'not a regular file'


def open_lock_file(path: str) -> int:
    """Opens (creating it) the lock file `path` for reading and writing; returns its descriptor.

    Raises:
      NotALockFile: If `path` is a symbolic link, or not a regular file of one link.
      OSError: If it cannot be created or opened (a read-only directory).
    """
    # O_NONBLOCK: opening a FIFO or a device must not wait for a peer before it is refused.
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotALockFile(f'lock file {path} is a symbolic link: ragsieve follows no link there; '
                               'remove it and run again') from None
        if e.errno in (errno.EISDIR, errno.ENXIO):
            raise NotALockFile(f'lock file {path} is {_kind(os.lstat(path).st_mode)}, not a regular file; '
                               'remove it and run again') from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotALockFile(f'lock file {path} is {_kind(info.st_mode)}, not a regular file; remove it and run again')
        if info.st_nlink != 1:  # a hard link to a file elsewhere: writing it would write that file
            raise NotALockFile(f'lock file {path} has {info.st_nlink} names (a hard link): remove it and run again')
    except BaseException:
        os.close(fd)
        raise
    return fd


def same_file(fd: int, path: str) -> bool:
    """Whether `path`, not followed if a link, names the file open as `fd`."""
    try:
        named = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


class HeldFile:
    """A lock file whose `flock` this process holds, on the inode its path still names."""

    def __init__(self, path: str, fd: int):
        self.path, self.fd = path, fd

    def check(self) -> None:
        """Returns while the path still names the file locked.

        Raises:
          LockLost: If the file was deleted or replaced since it was locked.
        """
        if self.fd is None or not same_file(self.fd, self.path):
            raise LockLost(f'lock file {self.path} was deleted or replaced while held: another process may '
                           'hold a lock of its own there')

    def write(self, data: bytes) -> None:
        """Replaces what the file holds: it is a regular file of one name, checked when opened."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def release(self) -> None:
        """Releases the lock and closes the file (the path is left: deleting it would split the next lock)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)  # the flock goes with the last descriptor


def try_lock(path: str, on_busy=None) -> Optional[HeldFile]:
    """Takes an exclusive `flock` on `path` without waiting, on the file the path names once held.

    Args:
      path: The lock file, created if missing.
      on_busy: Called with the open descriptor when another process holds
        the lock (to read what the holder wrote), before it is closed.

    Returns:
      The held file, or None when another process holds it.

    Raises:
      NotALockFile: If `path` is no regular file of one link.
      LockLost: If the path was replaced each time it was locked.
    """
    import fcntl

    for _ in range(_REOPENS):
        fd = open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                if on_busy is not None:
                    on_busy(fd)
            finally:
                os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if same_file(fd, path):
            return HeldFile(path, fd)
        os.close(fd)  # deleted or replaced between open and flock: lock what the path names now
    raise LockLost(f'lock file {path} was replaced each time it was locked: is another process deleting it?')


def lock_directory(path: str) -> Optional[int]:
    """Takes an exclusive `flock` on the directory `path` itself; returns its descriptor, None when held elsewhere.

    A directory is not deleted while it holds anything and is not replaced
    by writing a file into it, so its lock survives what a lock file
    inside it does not. Filesystems without `flock` on directories (some
    network ones) return -1: the lock file alone guards them.

    Raises:
      NotALockFile: If `path` is a symbolic link or not a directory.
    """
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0))
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotALockFile(f'{path} is a symbolic link or not a directory: ragsieve locks no link') from None
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP):
            return -1
        raise
    return fd
