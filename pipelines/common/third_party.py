"""Third-party lines that say nothing a user can act on, silenced where they come from.

Only exact messages are dropped; every other warning of Beam, torch or
transformers still shows.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

# Beam's BigQuery clients, logged on the root logger when Beam is imported where apache-beam[gcp]'s
# apitools does not import: ragsieve uses neither BigQuery nor apitools, so nothing is to be done.
APITOOLS_WARNING = 'apitools not found, and bigquery client libraries are not available'


class DropMessage(logging.Filter):
    """Drops the records whose message starts with `start`."""

    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.start))


@contextlib.contextmanager
def quiet_imports() -> Iterator[None]:
    """Imports in the block log no `APITOOLS_WARNING` and leave the root logger as they found it.

    Beam logs it with `logging.warning`, which first gives a root logger
    without handlers Python's default one (`WARNING:root:...`): a handler
    held meanwhile keeps that from happening, so the job's own format still
    applies when it configures logging.
    """
    root = logging.getLogger()
    guard, drop = logging.NullHandler(), DropMessage(APITOOLS_WARNING)
    root.addHandler(guard)
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)
        root.removeHandler(guard)


# Beam's Python SDK pings its gRPC peers every 20 s, idle or not (`GRPCChannelFactory`); the Java job servers and
# runners of Beam 2.62 (what Maven serves here) allow one ping per 5 minutes (grpc-java's default) and answer more
# with GOAWAY "too_many_pings", closing every call of the connection: an engine's SDK worker idle for a minute
# (a stage of Java's sorts) then failed its next task ("call is closed", apache/beam#20971). Pings 6 minutes apart.
GRPC_KEEPALIVE_MS = 360_000


def calm_grpc_keepalive() -> None:
    """Beam's gRPC channels made from now on in this process ping their peer once per `GRPC_KEEPALIVE_MS`."""
    from apache_beam.runners.worker.channel_factory import GRPCChannelFactory

    GRPCChannelFactory.DEFAULT_OPTIONS = [
        (name, GRPC_KEEPALIVE_MS if name == 'grpc.keepalive_time_ms' else value)
        for name, value in GRPCChannelFactory.DEFAULT_OPTIONS]
