"""The small interface every vector store implements, and the registry that opens one by its URI.

A store holds one table of rows (`rows.store_schema`) keyed by chunk_id and
a marker saying which run it reflects. Adding a store is one module of this
package that defines a `Store` subclass with its `SCHEMES`, plus its test.

What a store prints goes through `Store.shown` (its URI, password masked)
and `shown_id` (an id read from a store, escaped and bounded), so no line
carries a secret, a control character or 100 KB of id.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import pkgutil
import urllib.parse
from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

# The table a store syncs into unless the URI's `?table=` names another.
DEFAULT_TABLE = 'ragsieve_chunks'
MASK = '***'
# Characters of an id a line shows before cutting it short.
SHOWN_ID_CHARS = 80


class StoreError(ValueError):
    """A store that cannot be synced as it is (its schema, its path, a lock): one line saying what to do."""


class LockHeld(StoreError):
    """Another sync holds the store's lock; the message names it."""


class LockLost(StoreError):
    """A sync lost its lock (its lock file replaced, its connection) or another sync wrote: it writes no more."""


def masked(uri: str) -> str:
    """`uri` with its password (in the authority or a `password=` option) replaced by `***`."""
    parsed = urllib.parse.urlsplit(uri)
    if not secrets_of(uri):
        return uri
    netloc = parsed.netloc
    if parsed.password is not None:
        user, _, host = netloc.rpartition('@')
        netloc = f'{user.split(":", 1)[0]}:{MASK}@{host}'
    query = '&'.join(f'password={MASK}' if part.split('=', 1)[0] == 'password' else part
                     for part in parsed.query.split('&') if part)
    return urllib.parse.urlunsplit(parsed._replace(netloc=netloc, query=query))


def secrets_of(uri: str) -> list[str]:
    """The passwords a URI carries, as written and decoded, for `redact`."""
    parsed = urllib.parse.urlsplit(uri)
    found = [parsed.password] if parsed.password else []
    found += urllib.parse.parse_qs(parsed.query).get('password', [])
    if parsed.password:
        found.append(urllib.parse.unquote(parsed.password))
    return sorted({s for s in found if s}, key=len, reverse=True)


def redact(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret replaced by `***` (a client's error may quote its connection string)."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def first_line(error: BaseException, redact: Callable[[str], str] = str) -> str:
    """The first line of an error's message (its type when it has none), without secrets, at most 300 characters."""
    return redact((str(error).strip().splitlines() or [type(error).__name__])[0])[:300]


def shown_id(chunk_id: Any, limit: int = SHOWN_ID_CHARS) -> str:
    """An id as a line may print it: control characters escaped, at most `limit` characters and its length."""
    if chunk_id is None:
        return 'NULL'
    text = str(chunk_id)
    escaped = ''.join(c if c.isprintable() else c.encode('unicode_escape').decode('ascii') for c in text[:limit])
    return escaped + (f'... ({len(text)} characters)' if len(text) > limit else '')


class Store(abc.ABC):
    """One table of a vector store, written by `sync.sync_run`.

    Every write is one batch, atomic on its own (a transaction, a Lance
    commit), so a sync killed at any moment leaves whole batches behind.
    A sync holds `lock` while it writes; `--verify` only reads. Where the
    store allows it (`FENCED`), each write is a fence: conditional, where
    it commits, on the state the sync read, so a sync paused past the loss
    of its lock lands none of its writes (it raises `LockLost`).
    """

    SCHEMES: tuple[str, ...] = ()
    # Whether every write commits only on the state the sync read (a store version, a row lock).
    FENCED = False
    # The URI options a store understands besides `table`; None: any (its client's).
    OPTIONS: Optional[tuple[str, ...]] = ()

    def __init__(self, uri: str):
        parsed = urllib.parse.urlsplit(uri)
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        self.uri = uri
        self.shown = masked(uri)
        self.secrets = secrets_of(uri)
        # What follows the scheme, without the query: a path (lancedb, milvus lite) or a host.
        self.target = uri.split('://', 1)[1].split('?', 1)[0]
        tables = query.pop('table', [DEFAULT_TABLE])
        if len(tables) != 1 or not tables[0]:
            raise StoreError(f'{self.shown}: ?table= must name one table, got {tables}')
        self.table = tables[0]
        problem = self.table_problem(self.table)
        if problem:
            raise StoreError(f'{self.shown}: table name {shown_id(self.table)!r} {problem}')
        unknown = sorted(set(query) - set(self.OPTIONS)) if self.OPTIONS is not None else []
        if unknown:
            raise StoreError(f'{self.shown}: unknown option(s) {unknown}; this store takes ?table=NAME'
                             + ''.join(f', ?{o}=' for o in self.OPTIONS))
        self.options = {k: v[-1] for k, v in query.items()}
        self.location = urllib.parse.urlunsplit(parsed._replace(query=urllib.parse.urlencode(self.options)))

    @classmethod
    def table_problem(cls, name: str) -> Optional[str]:
        """Why `name` cannot be this store's table (and its marker's `NAME_sync`), or None."""
        if not name.replace('_', '').isalnum() or not name.isascii():
            return 'must be ASCII letters, digits and _'
        return None

    def redact(self, text: str) -> str:
        """`text` without the URI's password."""
        return redact(text, self.secrets)

    @abc.abstractmethod
    def lock(self, wait: float, holder: str) -> ContextManager[None]:
        """Holds the store's sync lock, released when the process dies; waits up to `wait` seconds.

        Args:
          wait: Seconds to wait for another sync to release it; 0 refuses at once.
          holder: What this sync is (its run), for the message of a sync refused meanwhile.

        Raises:
          LockHeld: Naming the holder, when it is still held after `wait`.
        """

    @abc.abstractmethod
    def prepare(self, dim: int, create: bool) -> bool:
        """Checks the table and its marker; with `create`, makes them where missing. Returns whether the table is there.

        Never writes without `create` (`--verify`).

        Raises:
          StoreError: For a table or marker of other columns or vector size, naming what to do.
        """

    @abc.abstractmethod
    def scan(self, columns: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        """Every row of the table, `columns` only, a bounded batch at a time."""

    def scan_hashes(self, page_rows: int) -> Iterator[tuple[list, list]]:
        """`(chunk ids, row hashes)` of every row, a page at a time, as Python lists (a store may skip Arrow)."""
        for table in self.scan(('chunk_id', 'row_hash'), page_rows):
            yield table.column('chunk_id').to_pylist(), table.column('row_hash').to_pylist()

    def null_vector_ids(self) -> list[str]:
        """The chunk ids of rows without a vector (none where the schema forbids it)."""
        return []

    @abc.abstractmethod
    def upsert(self, rows: pa.Table) -> None:
        """Inserts the rows, replacing those whose chunk_id is there already, in one atomic write."""

    @abc.abstractmethod
    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Deletes every row of these chunk ids, duplicates too (absent ones are no error), in one atomic write."""

    def delete_null_keys(self) -> None:
        """Deletes rows without a chunk_id (only a store whose schema allows them has any)."""

    @abc.abstractmethod
    def read_marker(self) -> Any:
        """What the marker holds (a ragsieve marker is a dict with `run_id`), or None."""

    @abc.abstractmethod
    def write_marker(self, marker: dict) -> None:
        """Records which run the table now reflects, replacing whatever the marker held."""

    @abc.abstractmethod
    def search(self, vector: np.ndarray, k: int) -> list[str]:
        """The chunk ids of the `k` rows of highest inner product with `vector`, exact."""

    def unholdable(self, rows: pa.Table) -> list[Optional[str]]:
        """Per row of `rows` (the store's columns), why this store cannot hold it, or None."""
        return [None] * rows.num_rows

    def check_lock(self) -> None:
        """Before each read or write of a sync: returns while it still holds the store's lock.

        Raises:
          LockLost: When the lock was lost (its file deleted or replaced): the sync stops.
        """

    def recover(self) -> None:
        """Before a retry: reopens a lost connection (and retakes its lock).

        Raises:
          LockLost: When another sync took the lock, or wrote, meanwhile: the sync stops.
        """

    def upkeep(self, changed: int, rows: int) -> None:
        """After a sync that wrote `changed` of the table's `rows`: compaction, statistics."""

    def close(self) -> None:
        """Releases connections."""


@contextlib.contextmanager
def no_lock() -> Iterator[None]:
    """The lock of a store that has none ragsieve can hold."""
    yield


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
    """Returns `uri` if it names a store this install can open (`open_store`), without connecting.

    Raises:
      ValueError: Otherwise: an unknown scheme (listing the known ones), a bad path or table name.
    """
    open_store(uri)
    return uri


def open_store(uri: str) -> Store:
    """The store a URI names: `lancedb://PATH`, `postgresql://USER@HOST:PORT/DB`, ...

    Only parses the URI: a store connects when it is first used (a sync
    first takes its lock: Milvus Lite opens in one process at a time).

    Raises:
      ValueError: For an unknown scheme, a bad URI, or a client library that is not installed.
    """
    scheme = urllib.parse.urlsplit(uri).scheme
    if scheme not in _stores():
        raise ValueError(f'{masked(uri)!r}: unknown store; expected a URI starting with one of '
                         f'{[s + "://" for s in schemes()]}')
    return _stores()[scheme](uri)
