"""One writer per root on an object store: a lease object created by a conditional write, with an expiry.

An object store has no `flock`. A build takes its root by creating the
lease object only if none exists (S3 `If-None-Match: *`, GCS
`ifGenerationMatch=0`); a second build finds it and is refused, naming the
holder. The holder renews it in the background, each renewal conditional
on the version it wrote last, so a lease another process took over is
found, not overwritten. A killed build stops renewing: once its expiry has
passed, the next build replaces the lease (again conditionally, so two
waiting builds cannot both win) and goes on.

Expiry is judged by the clocks of the machines that read the lease: they
must agree to well within the lease's length (NTP does).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from typing import Iterator, Optional

from transforms.storage import object_writes

LOG = logging.getLogger('ragsieve.lease')

# A killed build blocks its root at most this long; renewed every third of it.
DEFAULT_SECONDS = 120.0


class Held(ValueError):
    """Another process holds the lease: one line naming it (a ValueError: exit 2, like a local lock)."""


class Lost(RuntimeError):
    """This process's lease was taken over (it expired while the process stalled): stop before writing more."""


def lease_body(holder: str, expires_at: float, seconds: float) -> bytes:
    """What the lease object holds: who holds it, until when."""
    return json.dumps({'holder': holder, 'expires_at': round(expires_at, 3), 'seconds': seconds},
                      sort_keys=True).encode('utf-8')


def read_body(data: bytes) -> Optional[dict]:
    """The lease's fields, or None when the object is no lease this module wrote (then it counts as expired)."""
    try:
        body = json.loads(data.decode('utf-8'))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get('holder'), str) or not isinstance(
            body.get('expires_at'), (int, float)) or isinstance(body.get('expires_at'), bool):
        return None
    return body


def is_expired(body: Optional[dict], now: float) -> bool:
    return body is None or now >= body['expires_at']


def default_holder() -> str:
    """`host:pid`: whom a refused build names."""
    import os

    return f'{socket.gethostname()}:{os.getpid()}'


class Lease:
    """A lease on one object path, taken with `acquire` and given back with `release`.

    Args:
      path: The lease object (`s3://bucket/root/.lock`, `gs://...`).
      root: What it guards, for messages.
      seconds: How long it lasts unless renewed.
      holder: Who holds it, for messages (`host:pid` by default).
    """

    def __init__(self, path: str, root: str, seconds: float = DEFAULT_SECONDS, holder: Optional[str] = None):
        if not seconds > 0:
            raise ValueError(f'a lease must last more than 0 seconds, got {seconds}')
        self.path, self.root, self.seconds = path, root, float(seconds)
        self.holder = holder or default_holder()
        self._version: Optional[str] = None
        self._lost: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _body(self) -> bytes:
        return lease_body(self.holder, time.time() + self.seconds, self.seconds)

    def acquire(self) -> None:
        """Takes the lease, or replaces an expired one.

        Raises:
          Held: When another process holds a lease that has not expired.
        """
        version = object_writes.create_if_absent(self.path, self._body())
        if version is None:
            found = object_writes.read_versioned(self.path)
            if found is None:  # deleted between the two calls: try once more
                version = object_writes.create_if_absent(self.path, self._body())
            else:
                data, current = found
                body = read_body(data)
                if not is_expired(body, time.time()):
                    left = body['expires_at'] - time.time()
                    raise Held(f'another ragsieve build is writing to {self.root} (held by {body["holder"]}, '
                               f'lease {self.path} expires in {left:.0f} s unless renewed)')
                version = object_writes.replace_if_version(self.path, self._body(), current)
                if version is not None:
                    LOG.warning('took over the expired lease %s of %s', self.path,
                             body['holder'] if body else 'an unreadable holder')
        if version is None:
            raise Held(f'another ragsieve build took {self.root} at the same time (lease {self.path})')
        self._version = version
        self._thread = threading.Thread(target=self._renew, name='ragsieve-lease', daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                version = object_writes.replace_if_version(self.path, self._body(), self._version)
            except Exception as e:  # a store that does not answer now may answer at the next renewal
                LOG.warning('could not renew the lease %s: %s', self.path, e)
                continue
            if version is None:
                self._lost = f'the lease {self.path} on {self.root} was taken over by another process'
                return
            self._version = version

    def check(self) -> None:
        """Raises Lost when the lease is no longer this process's (call before publishing).

        Raises:
          Lost: Naming the lease.
        """
        if self._lost:
            raise Lost(self._lost + ': stopping before it writes more')

    def release(self) -> None:
        """Stops renewing and deletes the lease if it is still this process's."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        if self._version is not None and not self._lost:
            try:
                object_writes.delete_if_version(self.path, self._version)
            except Exception as e:  # it expires by itself
                LOG.warning('could not delete the lease %s (it expires in %.0f s): %s', self.path, self.seconds, e)
        self._version = None


@contextlib.contextmanager
def held(path: str, root: str, seconds: float = DEFAULT_SECONDS) -> Iterator[Lease]:
    """The lease on `path`, held for the block (see `Lease`)."""
    lease = Lease(path, root, seconds)
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()
