"""Live counts from the workers to the launcher: cumulative per process, a UDP datagram at most twice a second.

Beam's counters reach the launcher only when a bundle ends, and the
embedding stage of a build is one long bundle; so the stages that count
their work for the manifest also call `count`, which, when the launcher
set `ENV` (`HOST:PORT`), sends this process's cumulative counts to it,
with the job's token (`TOKEN_ENV`): the listener counts only datagrams that
carry it, so no other process on the machine can add to a build's counts.
A lost datagram costs nothing: the next one carries the same counts, and
more. Without `ENV` a call costs one environment lookup.
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


class _Sender:
    """This process's counts for one listener, and the socket they are sent through."""

    def __init__(self, address: str, token: str):
        self.address, self.token = address, token
        self.target = parse_address(address)
        self.sender = f'{socket.gethostname()}:{os.getpid()}'
        self.counts: collections.Counter = collections.Counter()
        self.sent = 0.0
        self.sequence = itertools.count(1)
        self.socket = socket.socket(socket.AF_INET6 if ':' in self.target[0] else socket.AF_INET, socket.SOCK_DGRAM)

    def send(self, now: float) -> None:
        self.sent = now
        message = {'sender': self.sender, 'sequence': next(self.sequence), 'counts': dict(self.counts),
                   'token': self.token}
        try:
            self.socket.sendto(json.dumps(message).encode('utf-8'), self.target)
        except OSError:  # a listener gone or unreachable: progress is never worth failing a build for
            pass


_lock = threading.Lock()
_sender: Optional[_Sender] = None


def _sender_for(address: str) -> Optional[_Sender]:
    """The sender for `address` and the job's token, made anew when either changes (a new build in this process)."""
    global _sender
    token = os.environ.get(TOKEN_ENV, '')
    if _sender is None or _sender.address != address or _sender.token != token:
        try:
            _sender = _Sender(address, token)
        except (ValueError, OSError):
            return None
    return _sender


def count(key: str, n: int = 1) -> None:
    """Adds `n` to this process's count `key`; sends the counts if none were sent for `SEND_SECONDS`."""
    address = os.environ.get(ENV)
    if not n or not address:
        return
    with _lock:
        sender = _sender_for(address)
        if sender is None:
            return
        sender.counts[key] += n
        now = time.monotonic()
        if now - sender.sent >= SEND_SECONDS:
            sender.send(now)


def flush() -> None:
    """Sends the counts now: a stage's last ones, at the end of its bundle."""
    address = os.environ.get(ENV)
    if not address:
        return
    with _lock:
        sender = _sender_for(address)
        if sender is not None and sender.counts:
            sender.send(time.monotonic())
