"""One writer per store: the lock a sync holds while it writes, and how a refused sync names its holder.

LanceDB and Milvus Lite keep no server that could hold a lock, so the lock
is a file beside the store's data, held with `flock`: the kernel releases
it when its holder exits or is killed, and a file left behind holds
nothing. PostgreSQL holds an advisory lock instead (`pgvector_store`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import time
from typing import Callable, Iterator, Optional

from transforms.sync.store import LockHeld, shown_id

# How often a sync waiting for a lock (`--wait`) tries it again.
POLL_SECONDS = 0.2


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


@contextlib.contextmanager
def file_lock(path: str, what: str, wait: float, holder: str) -> Iterator[None]:
    """Holds an exclusive `flock` on `path` (created if missing) while the block runs.

    Args:
      path: The lock file, beside the store's data.
      what: The store, for the message (its URI, masked).
      wait: Seconds to wait for a holder to release it.
      holder: What this sync is, written into the file for a refused sync to read.

    Raises:
      LockHeld: Naming the holder, when it is still held after `wait`.
      OSError: When the file cannot be created (a read-only directory).
    """
    import fcntl

    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        def take() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

        if not retry_until(take, wait):
            raise refused(what, _read_record(fd), wait)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder_record(holder), sort_keys=True).encode('utf-8'), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # a released lock names nobody
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read_record(fd: int) -> Optional[dict]:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode('utf-8'))
    except ValueError:  # empty (the holder is starting) or not ours
        return None
