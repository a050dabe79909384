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
