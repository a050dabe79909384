"""The small interface every vector store implements, and the registry that opens one by its URI.

A store holds one table of rows (`rows.store_schema`) keyed by chunk_id and
a marker saying which run it reflects. Adding a store is one module of this
package that defines a `Store` subclass with its `SCHEMES`, plus its test.
"""

from __future__ import annotations

import abc
import importlib
import pkgutil
import urllib.parse
from typing import Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

# The table a store syncs into unless the URI's `?table=` names another.
DEFAULT_TABLE = 'ragsieve_chunks'


class StoreError(RuntimeError):
    """A store refused an operation; the message says which and why."""


class Store(abc.ABC):
    """One table of a vector store, written by `sync.sync_run`.

    Every write is one batch, atomic on its own (a transaction, a Lance
    commit), so a sync killed at any moment leaves whole batches behind.
    """

    SCHEMES: tuple[str, ...] = ()

    def __init__(self, uri: str):
        parsed = urllib.parse.urlsplit(uri)
        query = urllib.parse.parse_qs(parsed.query)
        self.uri = uri
        # What follows the scheme, without the query: a path (lancedb, milvus lite) or a host.
        self.target = uri.split('://', 1)[1].split('?', 1)[0]
        self.table = query.pop('table', [DEFAULT_TABLE])[-1]
        if not self.table.replace('_', '').isalnum():
            raise ValueError(f'store table name {self.table!r} must be letters, digits and _')
        self.options = {k: v[-1] for k, v in query.items()}
        self.location = urllib.parse.urlunsplit(parsed._replace(query=urllib.parse.urlencode(self.options)))

    @abc.abstractmethod
    def prepare(self, dim: int) -> None:
        """Creates the table and its marker if missing; refuses a table of other columns or vector size."""

    @abc.abstractmethod
    def scan(self, columns: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        """Every row of the table, `columns` only, a bounded batch at a time."""

    @abc.abstractmethod
    def upsert(self, rows: pa.Table) -> None:
        """Inserts the rows, replacing those whose chunk_id is there already, in one atomic write."""

    @abc.abstractmethod
    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Deletes the rows of these chunk ids (absent ones are no error), in one atomic write."""

    @abc.abstractmethod
    def read_marker(self) -> Optional[dict]:
        """The marker the last complete sync wrote (`run_id`, `rows`), or None."""

    @abc.abstractmethod
    def write_marker(self, marker: dict) -> None:
        """Records which run the table now reflects."""

    @abc.abstractmethod
    def search(self, vector: np.ndarray, k: int) -> list[str]:
        """The chunk ids of the `k` rows of highest inner product with `vector`, exact."""

    def close(self) -> None:
        """Releases connections."""


def _stores() -> dict[str, type]:
    found = {}
    package = importlib.import_module(__package__)
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.endswith('_store'):
            module = importlib.import_module(f'{__package__}.{info.name}')
            for scheme in module.STORE.SCHEMES:
                found[scheme] = module.STORE
    return found


def schemes() -> list[str]:
    """The URI schemes of the stores this install can open."""
    return sorted(_stores())


def check_uri(uri: str) -> str:
    """Returns `uri` if it names a store this install knows, without connecting.

    Raises:
      ValueError: Otherwise, listing the known schemes.
    """
    scheme = urllib.parse.urlsplit(uri).scheme
    if scheme not in _stores():
        raise ValueError(f'{uri!r}: unknown store; expected a URI starting with one of '
                         f'{[s + "://" for s in schemes()]}')
    return uri


def open_store(uri: str) -> Store:
    """The store a URI names: `lancedb://PATH`, `postgresql://USER@HOST:PORT/DB`, ...

    Raises:
      ValueError: For an unknown scheme, or a client library that is not installed.
    """
    return _stores()[urllib.parse.urlsplit(check_uri(uri)).scheme](uri)
