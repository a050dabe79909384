"""One writer per root on an object store: a lease object created by a conditional write, with an expiry.

An object store has no `flock`. A build takes its root by creating the
lease object only if none exists (S3 `If-None-Match: *`, GCS
`ifGenerationMatch=0`); a second build finds it and is refused, naming the
holder. The holder renews it in the background, each renewal conditional
on the version it wrote last, so a lease another process took over is
found, not overwritten. A killed build stops renewing: once its expiry has
passed, the next build replaces the lease (again conditionally, so two
waiting builds cannot both win) and goes on.

The holder judges its lease by its own monotonic clock: lost once no
renewal has succeeded for `seconds` less a margin (`SAFETY_FRACTION`),
whether the store refused the renewals or never answered them, so a
process paused (SIGSTOP, a VM frozen, a partition) past its lease finds
it lost when it resumes, before it writes. A lease is only a check: the
fences are the commit points themselves, conditional writes on the state
a writer started from (`snapshots.publish_latest`); `fence` renews the
lease conditionally right before them.

Each lease carries a token of its own. A request whose response was lost
(the store applied it, the answer never came, the client retried and was
refused) is resolved by reading the object back: the same holder and token
is this lease, never "another process".

Expiry is judged by the clocks of the machines that read the lease: they
must agree to well within the lease's margin (NTP does).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from typing import Callable, Iterator, Optional

from transforms.storage import object_writes

LOG = logging.getLogger('ragsieve.lease')

# A killed build blocks its root at most this long; renewed every third of it.
DEFAULT_SECONDS = 120.0
# The holder counts its lease lost this fraction of its length before others may take it over:
# room for the clocks of two machines to disagree and for the request that renewed it to travel.
SAFETY_FRACTION = 0.25
# After a renewal failed, the next try comes this much sooner (a fraction of the lease, at most 5 s).
RETRY_FRACTION = 1 / 12


class Held(ValueError):
    """Another process holds the lease: one line naming it (a ValueError: exit 2, like a local lock)."""


class Lost(ValueError):
    """This process's lease was lost (taken over, or not renewed in time): it stops before writing more.

    A ValueError: one line and exit 2, as for any other reason a build publishes nothing.
    """


def lease_body(holder: str, expires_at: float, seconds: float, token: str = '', job: Optional[dict] = None) -> bytes:
    """What the lease object holds: who holds it, until when, the token of this holding, and the job it runs
    elsewhere (an engine's), for the next holder to cancel should this one die."""
    body = {'holder': holder, 'expires_at': round(expires_at, 3), 'seconds': seconds}
    if token:
        body['token'] = token
    if job:
        body['job'] = job
    return json.dumps(body, sort_keys=True).encode('utf-8')


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
    return f'{socket.gethostname()}:{os.getpid()}'


class Lease:
    """A lease on one object path, taken with `acquire` and given back with `release`.

    Args:
      path: The lease object (`s3://bucket/root/.lock`, `gs://...`).
      root: What it guards, for messages.
      seconds: How long it lasts unless renewed.
      holder: Who holds it, for messages (`host:pid` by default).
      clock: The monotonic clock the holder judges its lease by (tests pass their own).
      on_takeover: Called with an expired lease's fields before this one replaces it: what its killed holder
        left running (the `job` it recorded) is stopped there, before this holder cleans up after it.
    """

    def __init__(self, path: str, root: str, seconds: float = DEFAULT_SECONDS, holder: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_takeover: Optional[Callable[[dict], None]] = None):
        if not seconds > 0:
            raise ValueError(f'a lease must last more than 0 seconds, got {seconds}')
        self.path, self.root, self.seconds = path, root, float(seconds)
        self.holder = holder or default_holder()
        self.token = secrets.token_hex(8)  # not an output id: only tells this holding from any other
        self._clock = clock
        self._on_takeover = on_takeover
        self._job: Optional[dict] = None
        self._version: Optional[str] = None
        self._renewed_at: Optional[float] = None  # when the last successful write was sent, by `clock`
        self._lost: Optional[str] = None
        self._write = threading.Lock()  # one conditional write at a time: the renewer's or `fence`'s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def safe_seconds(self) -> float:
        """How long after its last renewal was sent the holder still counts the lease its own."""
        return self.seconds * (1 - SAFETY_FRACTION)

    def _body(self) -> bytes:
        return lease_body(self.holder, time.time() + self.seconds, self.seconds, self.token, self._job)

    def record(self, job: dict) -> None:
        """Records `job` (what this holder runs elsewhere: an engine's job) in the lease now, and in each renewal.

        Raises:
          Lost: When the lease was lost.
        """
        self._job = job
        self.fence()

    def _ours(self, found: Optional[tuple[bytes, str]]) -> Optional[str]:
        """The version of `found` when it is this holding's lease (a write whose answer was lost), else None."""
        if found is None:
            return None
        body = read_body(found[0])
        if body is not None and body['holder'] == self.holder and body.get('token') == self.token:
            return found[1]
        return None

    def acquire(self) -> None:
        """Takes the lease, or replaces an expired one.

        Raises:
          Held: When another process holds a lease that has not expired.
        """
        sent = self._clock()
        version = object_writes.create_if_absent(self.path, self._body())
        if version is None:
            found = object_writes.read_versioned(self.path)
            version = self._ours(found)
            if found is None:  # deleted between the two calls: try once more
                sent = self._clock()
                version = object_writes.create_if_absent(self.path, self._body())
            elif version is None:
                data, current = found
                body = read_body(data)
                if not is_expired(body, time.time()):
                    left = body['expires_at'] - time.time()
                    raise Held(f'another ragsieve build is writing to {self.root} (held by {body["holder"]}, '
                               f'lease {self.path} expires in {left:.0f} s unless renewed)')
                if body is not None and self._on_takeover is not None:
                    self._on_takeover(body)
                sent = self._clock()
                version = object_writes.replace_if_version(self.path, self._body(), current)
                version = version or self._ours(object_writes.read_versioned(self.path))
                if version is not None:
                    LOG.warning('took over the expired lease %s of %s', self.path,
                                body['holder'] if body else 'an unreadable holder')
        if version is None:
            raise Held(f'another ragsieve build took {self.root} at the same time (lease {self.path})')
        self._version, self._renewed_at = version, sent
        self._thread = threading.Thread(target=self._renew_in_background, name='ragsieve-lease', daemon=True)
        self._thread.start()

    def _renew(self) -> bool:
        """Renews the lease conditionally on the version written last; whether it is still this process's.

        Raises:
          Exception: The store's, when it did not answer (the lease may still be ours).
        """
        with self._write:
            if self.lost():
                return False
            sent, body = self._clock(), self._body()
            version = object_writes.replace_if_version(self.path, body, self._version)
            if version is None:
                # Refused: taken over, or our own write applied and its answer lost (then the object is ours).
                found = object_writes.read_versioned(self.path)
                version = self._ours(found) if found is not None and found[0] == body else None
            if version is None:
                self._lost = f'the lease {self.path} on {self.root} was taken over by another process'
                return False
            self._version, self._renewed_at = version, sent
            return True

    def _renew_in_background(self) -> None:
        wait = self.seconds / 3
        while not self._stop.wait(wait):
            try:
                if not self._renew():
                    return
                wait = self.seconds / 3
            except Exception as e:  # a store that does not answer now may answer at the next try
                LOG.warning('could not renew the lease %s (tried again in %.0f s): %s', self.path,
                            min(self.seconds * RETRY_FRACTION, 5.0), _first_line(e))
                wait = min(self.seconds * RETRY_FRACTION, 5.0)

    def lost(self) -> Optional[str]:
        """Why the lease is no longer this process's, or None while it is (judged by this process's clock).

        Once lost, always lost: a renewal after it could succeed only if no
        one took the lease meanwhile, but the holder cannot know that
        another build did not come and go.
        """
        if not self._lost and self._renewed_at is not None:
            since = self._clock() - self._renewed_at
            if since >= self.safe_seconds:
                self._lost = (f'the lease {self.path} on {self.root} was lost: no renewal succeeded for {since:.0f} s '
                              f'(this process was paused or cut off from the store past its lease of '
                              f'{self.seconds:g} s)')
        return self._lost

    def check(self) -> None:
        """Raises Lost when the lease is no longer this process's (call before each step that writes).

        Raises:
          Lost: Naming the lease and why.
        """
        why = self.lost()
        if why:
            raise Lost(why + ': this build stops before it writes more; nothing was published')

    def fence(self) -> None:
        """Renews the lease now, conditionally, and returns only while it is this process's.

        Call right before a commit point: the lease then lasts `safe_seconds`
        from here, and a holder that lost it learns so now, not after the write.

        Raises:
          Lost: When the lease was lost, or cannot be renewed before it runs out.
        """
        self.check()
        try:
            self._renew()
        except Exception as e:  # the store did not answer: ours only while the clock says so
            LOG.warning('could not renew the lease %s before committing: %s', self.path, _first_line(e))
        self.check()

    def release(self) -> None:
        """Stops renewing and deletes the lease while it is still this process's.

        A lost lease is left alone: it expired, or is another's now (S3's
        delete compares, then deletes, which could meet the new holder's).
        A renewal still trying to reach the store is not waited for then.
        """
        self._stop.set()
        if self.lost() is None and self._version is not None:
            with self._write:  # after a renewal in flight
                if self.lost() is None:
                    try:
                        object_writes.delete_if_version(self.path, self._version)
                    except Exception as e:  # it expires by itself
                        LOG.warning('could not delete the lease %s (it expires in %.0f s): %s', self.path,
                                    self.seconds, _first_line(e))
            if self._thread:
                self._thread.join()
        self._version = None


def _first_line(error: BaseException) -> str:
    text = ' '.join(str(error).split())
    return f'{type(error).__name__}: {text[:200]}'


@contextlib.contextmanager
def held(path: str, root: str, seconds: float = DEFAULT_SECONDS,
         on_takeover: Optional[Callable[[dict], None]] = None) -> Iterator[Lease]:
    """The lease on `path`, held for the block (see `Lease`)."""
    lease = Lease(path, root, seconds, on_takeover=on_takeover)
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()
