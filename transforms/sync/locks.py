"""One writer per store: the lock a sync holds while it writes, and how a refused sync names its holder.

LanceDB and Milvus Lite keep no server that could hold a lock, so the lock
is a file beside the store's data, held with `flock`: the kernel releases
it when its holder exits or is killed. The file must stay: deleting or
replacing it would let a second sync take a lock of its own, so a sync
that finds its lock file gone or replaced stops (`FileLock.check`).
A check alone is no fence: a sync paused between its check and its write
would land the write after all, so LanceDB's commits are made inside a
`commit_section` of the store's directory, which no rename splits.
PostgreSQL holds an advisory lock instead (`pgvector_store`).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import socket
import time
from typing import Callable, Iterator, Optional

from transforms import file_locks
from transforms.sync.store import LockHeld, LockLost, StoreError, shown_id

# How often a sync waiting for a lock (`--wait`) tries it again.
POLL_SECONDS = 0.2
# How long a commit waits for another sync's to end: a commit takes moments (a compaction seconds); one
# held longer is a paused sync's.
COMMIT_WAIT_SECONDS = 120.0


def holder_record(holder: str) -> dict:
    """What a lock's holder says of itself: its process, host, start and what it syncs."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return {'pid': os.getpid(), 'host': socket.gethostname(), 'since': now.isoformat().replace('+00:00', 'Z'),
            'syncing': holder}


def describe_holder(record: Optional[dict]) -> str:
    """`pid 12 on host h since 2026-...Z (run r2)`, escaped: it was read from a file or a server anyone writes."""
    if not isinstance(record, dict) or not record.get('pid'):
        return 'another sync (which has not yet said who it is)'
    return (f'pid {shown_id(record.get("pid"))} on host {shown_id(record.get("host"))} since '
            f'{shown_id(record.get("since"))} ({shown_id(record.get("syncing"))})')


def refused(what: str, record: Optional[dict], wait: float) -> LockHeld:
    """The error of a sync that did not get the lock."""
    waited = f' after waiting {wait:g} s' if wait > 0 else ''
    return LockHeld(f'{what} is being synced by {describe_holder(record)}{waited}; one sync writes a store at a '
                    'time: wait for it, or pass --wait SECONDS')


def retry_until(take: Callable[[], bool], wait: float, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Calls `take` until it returns True or `wait` seconds have passed; returns its last answer."""
    deadline = time.monotonic() + wait
    while not take():
        if time.monotonic() >= deadline:
            return False
        sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    return True


class FileLock:
    """An exclusive `flock` on `path` (created if missing) while the block runs; `check` while held.

    The file follows no link and must be a regular file of one name
    (`file_locks.open_lock_file`); the lock is held only on the file its
    path still names, and `check` refuses to go on once the file was
    deleted or replaced, since a second sync may then hold a lock of its own.

    Args:
      path: The lock file, beside the store's data.
      what: The store, for the message (its URI, masked).
      wait: Seconds to wait for a holder to release it.
      holder: What this sync is, written into the file for a refused sync to read.

    Raises:
      LockHeld: Naming the holder, when it is still held after `wait`.
      StoreError: When the path is a link or no regular file.
      OSError: When the file cannot be created (a read-only directory).
    """

    def __init__(self, path: str, what: str, wait: float, holder: str):
        self.path, self.what, self.wait, self.holder = path, what, wait, holder
        self._held: Optional[file_locks.HeldFile] = None

    def __enter__(self) -> 'FileLock':
        os.makedirs(os.path.dirname(self.path) or '.', exist_ok=True)
        record: list = [None]

        def take() -> bool:
            def busy(fd):
                record[0] = _read_record(fd)
            try:
                self._held = file_locks.try_lock(self.path, busy)
            except (file_locks.NotALockFile, file_locks.LockLost) as e:
                raise StoreError(f'{self.what}: {e}') from None
            return self._held is not None

        if not retry_until(take, self.wait):
            raise refused(self.what, record[0], self.wait)
        self._held.write(json.dumps(holder_record(self.holder), sort_keys=True).encode('utf-8'))
        return self

    def __exit__(self, *exc) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        try:
            if file_locks.same_file(held.fd, held.path):
                held.write(b'')  # a released lock names nobody
        finally:
            held.release()

    def check(self) -> None:
        """Returns while this sync holds the store's lock; a no-op when not held (`--verify`).

        Raises:
          LockLost: If the lock file was deleted or replaced since it was locked.
        """
        if self._held is None:
            return
        try:
            self._held.check()
        except file_locks.LockLost as e:
            raise LockLost(f'{self.what}: {e}') from None


@contextlib.contextmanager
def commit_section(directory: str, what: str, wait: float = COMMIT_WAIT_SECONDS) -> Iterator[None]:
    """Holds an exclusive `flock` on the store's directory itself while one commit is checked and made.

    Renaming or deleting a lock file lets a second sync lock a new one; the
    directory holding the store's tables is not split so. Every commit of
    every sync runs in this section after checking that its lock file is
    still its own, and a sync that has just taken the lock passes through it
    before reading the store: a commit that a paused sync checked before it
    lost its lock lands before the new holder reads, never after. A
    filesystem without `flock` on directories gives no section: the
    versions each commit is conditional on still fence it.

    Raises:
      StoreError: When another sync's commit held it for `wait` seconds (a paused sync).
    """
    import fcntl

    os.makedirs(directory, exist_ok=True)  # a first write makes the store's directory: its section with it
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))

    def take() -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        if not retry_until(take, wait):
            raise StoreError(f'{what}: another sync has been committing to it for {wait:g} s (is it paused?); '
                             'run again once it has ended')
    except OSError as e:
        if e.errno not in (errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP):
            os.close(fd)
            raise
    except BaseException:
        os.close(fd)
        raise
    try:
        yield
    finally:
        os.close(fd)  # the flock goes with it


def file_lock(path: str, what: str, wait: float, holder: str) -> FileLock:
    """The lock of a LanceDB or Milvus Lite store (`FileLock`)."""
    return FileLock(path, what, wait, holder)


def _read_record(fd: int) -> Optional[dict]:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode('utf-8'))
    except (ValueError, RecursionError):  # empty (the holder is starting) or not ours
        return None
