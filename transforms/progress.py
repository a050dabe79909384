"""Live counts from the workers to the launcher: cumulative per stage instance, a UDP datagram at most twice a second.

Beam's counters reach the launcher only when a bundle ends, and the
embedding stage of a build is one long bundle; so the stages that count
their work for the manifest also count it in a `Tally`, which, when the
launcher set `ENV` (`HOST:PORT`), sends its cumulative counts there, with
the job's token (`TOKEN_ENV`): the listener counts only datagrams that
carry it, so no other process on the machine can add to a build's counts.
A lost datagram costs nothing: the next one carries the same counts, and
more. Without `ENV` a count costs one environment lookup.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import socket
import threading
import time
from typing import Optional

# `HOST:PORT` of the launcher's listener (pipelines/build_progress.py); unset: nothing is sent.
ENV = 'RAGSIEVE_PROGRESS'
# The job's secret that every datagram carries, set beside `ENV` by the launcher.
TOKEN_ENV = 'RAGSIEVE_PROGRESS_TOKEN'
# What a listener accepts: counts are whole numbers below MAX_COUNT, at most
# MAX_KEYS of them, keys and senders at most MAX_NAME characters; anything else is not a message.
MAX_COUNT = 10 ** 15
MAX_KEYS = 256
MAX_NAME = 200
# At most this often a process sends: what a person reads needs no more.
SEND_SECONDS = 0.5
# What the stages count, each named as the Beam counter that counts the same (`namespace.name`), so
# that the counters of the finished job replace the live counts: files read, documents read, chunks
# made, chunks through the embedding stage (cached ones too), part files written; each filter's
# `filter_key(namespace, KEPT | DROPPED)`.
FILES, DOCUMENTS, CHUNKS, EMBEDDED, PARTS = 'read.files', 'read.documents', 'chunk.chunks', 'embed.chunks', 'write.parts'
KEPT, DROPPED = 'kept', 'dropped'


def filter_key(namespace: str, outcome: str) -> str:
    """The count of one filter's kept or dropped chunks, e.g. `filter_0_exact.dropped`, as its Beam counter."""
    return f'{namespace}.{outcome}'


def parse_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` -> `(host, port)`.

    Raises:
      ValueError: For anything else.
    """
    host, _, port = address.rpartition(':')
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'{ENV}={address!r}: expected HOST:PORT')
    return host, int(port)


class _Channel:
    """The socket this process sends through to one listener, with the job's token."""

    def __init__(self, address: str, token: str):
        self.address, self.token = address, token
        self.target = parse_address(address)
        self.socket = socket.socket(socket.AF_INET6 if ':' in self.target[0] else socket.AF_INET, socket.SOCK_DGRAM)

    def send(self, sender: str, sequence: int, counts: dict) -> None:
        message = {'sender': sender, 'sequence': sequence, 'counts': counts, 'token': self.token}
        try:
            self.socket.sendto(json.dumps(message).encode('utf-8'), self.target)
        except OSError:  # a listener gone or unreachable: progress is never worth failing a build for
            pass


_lock = threading.Lock()
_channel: Optional[_Channel] = None
# Numbers this process's tallies, so each sends as a sender of its own.
_tallies = itertools.count(1)


def _channel_for(address: str) -> Optional[_Channel]:
    """The channel to `address` with the job's token, made anew when either changes (a new build in this process)."""
    global _channel
    token = os.environ.get(TOKEN_ENV, '')
    if _channel is None or _channel.address != address or _channel.token != token:
        try:
            _channel = _Channel(address, token)
        except (ValueError, OSError):
            return None
    return _channel


class Tally:
    """One stage instance's live counts, cumulative, sent as a sender of their own.

    A DoFn makes one in its constructor; each deserialized copy of it (one
    per bundle processor of an SDK worker) counts apart, as
    `HOST:PID/N`. So the launcher can tell the counts of a job's attempt
    from those of an attempt an engine restarted: a restarted task's DoFns
    are new copies, even in an SDK worker that served the failed attempt,
    and their first counts arrive after the failure (the listener's
    `restarted`). Counts start again for a new listener's address or token.
    """

    def __init__(self):
        self._reset(None)

    def __getstate__(self) -> dict:
        return {}  # a copy counts from zero, as a sender of its own

    def __setstate__(self, state: dict) -> None:
        self._reset(None)

    def _reset(self, channel: Optional[_Channel]) -> None:
        self._channel = channel
        self._sender: Optional[str] = None
        self._counts: collections.Counter = collections.Counter()
        self._sequence = itertools.count(1)
        self._sent = float('-inf')

    def count(self, key: str, n: int = 1) -> None:
        """Adds `n` to the count `key`; sends the counts if none were sent for `SEND_SECONDS`."""
        address = os.environ.get(ENV)
        if not n or not address:
            return
        with _lock:
            if not self._ready(address):
                return
            self._counts[key] += n
            now = time.monotonic()
            if now - self._sent >= SEND_SECONDS:
                self._send(now)

    def flush(self) -> None:
        """Sends the counts now: a stage's last ones, at the end of its bundle."""
        address = os.environ.get(ENV)
        if not address:
            return
        with _lock:
            if self._ready(address) and self._counts:
                self._send(time.monotonic())

    def _ready(self, address: str) -> bool:
        channel = _channel_for(address)
        if channel is None:
            return False
        if channel is not self._channel:
            self._reset(channel)
        if self._sender is None:
            self._sender = f'{socket.gethostname()}:{os.getpid()}/{next(_tallies)}'
        return True

    def _send(self, now: float) -> None:
        self._sent = now
        self._channel.send(self._sender, next(self._sequence), dict(self._counts))
