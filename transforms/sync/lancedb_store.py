"""LanceDB, the embedded default: `lancedb://PATH[?table=NAME]`, no server, Arrow in and out.

The sync lock is `NAME.sync-lock` in the store's directory. Lance does not
enforce keys, so a table may hold an id twice, and one made by an earlier
ragsieve NULL ids or vectors: the sync finds and repairs them.
Every write is a Lance commit, a version of its own, made by `_commit`:
conditional on the versions of the table and its marker this sync last
read or wrote (Lance itself rebases a commit onto any newer version, even
one its write never read), inside the store directory's commit section.
Once a sync leaves the table with more than `?keep_versions=` (default
`KEEP_VERSIONS`), it compacts the table and keeps the newest half of them.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.sync import locks, rows
from transforms.sync.store import LockLost, Store, StoreError

MARKER_SUFFIX = '_sync'
LOCK_SUFFIX = '.sync-lock'
KEEP_VERSIONS = 20
# Ids per delete predicate: Lance parses the IN list as SQL.
_DELETE_IDS = 1000
_MARKER_SCHEMA = pa.schema([('marker', pa.string())])


def _quoted(chunk_id: str) -> str:
    return "'" + chunk_id.replace("'", "''") + "'"


class LanceDBStore(Store):
    """A LanceDB table; upserts are one `merge_insert` on chunk_id, each a commit of its own."""

    SCHEMES = ('lancedb',)
    OPTIONS = ('keep_versions',)
    FENCED = True

    def __init__(self, uri: str):
        super().__init__(uri)
        try:
            import lancedb  # noqa: F401
        except ImportError:
            raise ValueError("lancedb:// needs the LanceDB client: pip install 'ragsieve[lancedb]'") from None
        if self.target.strip('/') == '':
            raise StoreError(f'{self.shown} names no directory: lancedb://PATH (lancedb:///abs/path or '
                             'lancedb://relative/path)')
        if os.path.isfile(self.target):
            raise StoreError(f'{self.shown}: {self.target} is a file, not a LanceDB directory')
        keep = self.options.get('keep_versions', str(KEEP_VERSIONS))
        if not keep.isdigit() or int(keep) < 1:
            raise StoreError(f'{self.shown}: ?keep_versions= must be a whole number >= 1, got {keep!r}')
        self.keep_versions = int(keep)
        self._connection = None
        self._lock: Optional[locks.FileLock] = None
        self._table = None
        # The version of the table and of its marker this sync last read or wrote (None: not there then).
        self._versions: dict[str, Optional[int]] = {}

    @property
    def _db(self):
        if self._connection is None:
            import lancedb

            self._connection = lancedb.connect(self.target)  # creates the directory: only once writing
        return self._connection

    def _names(self) -> set:
        if self._connection is None and not os.path.isdir(self.target):
            return set()
        result = self._db.list_tables()
        return set(getattr(result, 'tables', result))

    @contextlib.contextmanager
    def lock(self, wait: float, holder: str) -> Iterator[None]:
        self._lock = locks.file_lock(os.path.join(self.target, self.table + LOCK_SUFFIX), self.shown, wait, holder)
        with self._lock:
            with locks.commit_section(self.target, self.shown):
                pass  # a commit that a sync which lost this lock had checked lands before this sync reads
            yield

    def check_lock(self) -> None:
        if self._lock is not None:
            self._lock.check()

    def prepare(self, dim: int, create: bool) -> bool:
        schema = rows.store_schema(dim)
        names = self._names()
        marker = self.table + MARKER_SUFFIX
        marker_table = self._db.open_table(marker) if marker in names else None
        if marker_table is not None and marker_table.schema != _MARKER_SCHEMA:
            raise StoreError(f'{self.shown}: table {marker!r} is not a ragsieve marker (its columns: '
                             f'{marker_table.schema.names}); drop it or sync into another ?table=')
        self._versions = {self.table: None, marker: marker_table.version if marker_table is not None else None}
        if self.table in names:
            # Reads go through this handle, at this version, until this sync writes: what its writes are conditional on.
            self._table = self._db.open_table(self.table)
            self._versions[self.table] = self._table.version
            difference = rows.schema_difference(self._table.schema, schema)
            if difference:
                raise StoreError(f'{self.shown}: table {self.table!r} is not the {dim}-dimensional rows of '
                                 f'ragsieve ({difference}); drop it or sync into another ?table=')
            return True
        if create:
            self._table = self._commit(self.table, lambda: self._db.create_table(self.table,
                                                                                 schema=_new_table_schema(dim)))
            return True
        return False

    def _version_now(self, name: str) -> Optional[int]:
        """The newest version of table `name` on disk, or None when there is no such table."""
        return self._db.open_table(name).version if name in self._names() else None

    def _check_versions(self) -> None:
        """Raises LockLost unless the table and its marker are at the versions this sync last read or wrote."""
        for name, seen in self._versions.items():
            now = self._version_now(name)
            if now != seen:
                raise LockLost(f'{self.shown}: table {name!r} is {_at(now)}, not {_at(seen)} as this sync last read '
                               'or wrote it: another sync wrote the store')

    def _commit(self, name: str, write: Callable[[], Any]) -> Any:
        """The one commit point of a sync into LanceDB; `write` commits once to table `name` and returns its handle.

        Fenced against another sync having taken the lock or written: inside
        the store directory's commit section (one commit of any sync at a
        time), this sync's lock file must still be its own and the table and
        its marker at the versions this sync last read or wrote; the commit
        must then be the next version of `name`, else a writer that holds no
        ragsieve lock committed at the same moment.

        Raises:
          LockLost: Before writing, when the lock file was replaced or another sync wrote the store.
          StoreError: After writing, when the commit did not follow the version it was conditional on.
        """
        with locks.commit_section(self.target, self.shown):
            self.check_lock()
            self._check_versions()
            table = write()
            expected = (self._versions[name] or 0) + 1
            if table.version != expected:
                raise StoreError(f'{self.shown}: table {name!r} took this sync\'s write as version {table.version}, '
                                 f'not {expected}: a writer that holds no ragsieve lock wrote it at the same time; '
                                 'sync again once it is done')
            self._versions[name] = table.version
            return table

    def scan(self, columns: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        reader = self._table.search().select(list(columns)).limit(None).to_batches(batch_rows)
        for batch in reader:
            yield pa.Table.from_batches([batch])

    def null_vector_ids(self) -> list[str]:
        if not self._table.schema.field('embedding').nullable:
            return []  # Lance refuses them
        hits = self._table.search().where('embedding IS NULL').select(['chunk_id']).limit(None).to_arrow()
        return hits.column('chunk_id').to_pylist()

    def upsert(self, table: pa.Table) -> None:
        self._commit(self.table, lambda: self._rows_written(
            lambda: self._table.merge_insert('chunk_id').when_matched_update_all().when_not_matched_insert_all()
            .execute(table)))

    def delete(self, chunk_ids: Sequence[str]) -> None:
        for start in range(0, len(chunk_ids), _DELETE_IDS):
            ids = ', '.join(_quoted(c) for c in chunk_ids[start:start + _DELETE_IDS])
            self._commit(self.table, lambda ids=ids: self._rows_written(
                lambda: self._table.delete(f'chunk_id IN ({ids})')))

    def delete_null_keys(self) -> None:
        self._commit(self.table, lambda: self._rows_written(lambda: self._table.delete('chunk_id IS NULL')))

    def _rows_written(self, write: Callable[[], Any]):
        """Runs one commit through the table's handle, which then stands at the version it made; returns the handle."""
        write()
        return self._table

    def _marker_table(self):
        name = self.table + MARKER_SUFFIX
        return self._db.open_table(name) if name in self._names() else None

    def read_marker(self) -> Any:
        table = self._marker_table()
        if table is None or table.count_rows() == 0:
            return None
        values = table.to_arrow().column('marker').to_pylist()
        if len(values) != 1 or values[0] is None:
            return values
        try:
            return json.loads(values[0])
        except ValueError:
            return values[0]

    def write_marker(self, marker: dict) -> None:
        data = pa.table({'marker': [json.dumps(marker, sort_keys=True)]}, schema=_MARKER_SCHEMA)
        name = self.table + MARKER_SUFFIX
        # One row, replaced whole: `mode='overwrite'` is one commit; `create` fails where another made it meanwhile.
        self._commit(name, lambda: self._db.create_table(
            name, data=data, mode='create' if self._versions[name] is None else 'overwrite'))

    def search(self, vector: np.ndarray, k: int) -> list[str]:
        hits = self._table.search(np.asarray(vector, np.float32)).metric('dot').limit(k).select(['chunk_id'])
        return [row['chunk_id'] for row in hits.to_list()]

    def upkeep(self, changed: int, rows: int) -> None:
        # Compaction commits and cleanup deletes files: fenced as a write is, its commits this sync's own.
        with locks.commit_section(self.target, self.shown):
            self.check_lock()
            self._check_versions()
            for table in (self._table, self._marker_table()):
                if table is not None:
                    prune(table, self.keep_versions)
            self._versions = {name: self._version_now(name) for name in self._versions}


def _at(version: Optional[int]) -> str:
    return 'missing' if version is None else f'at version {version}'


def _new_table_schema(dim: int) -> pa.Schema:
    """The rows' schema, with ids and vectors NOT NULL: Lance refuses NULLs there, and no sync looks for them.

    Tables made by earlier versions allow them; a sync finds and repairs them there.
    """
    schema = rows.store_schema(dim)
    for name in ('chunk_id', 'embedding'):
        schema = schema.set(schema.get_field_index(name), schema.field(name).with_nullable(False))
    return schema


def prune(table, keep: int) -> bool:
    """Once `table` holds more than `keep` versions, compacts it and keeps the newest `keep // 2`; returns if it did.

    Compaction rewrites the table (a first sync's 100 commits become one
    fragment), so it runs when the versions overflow, not after every sync:
    half of `keep` is left for the syncs to come. Files of killed syncs go
    too (`delete_unverified`): the sync lock is held, so no sync is writing.
    """
    if len(table.list_versions()) <= keep:
        return False
    table.optimize(cleanup_older_than=datetime.timedelta(days=36500))  # compaction alone
    kept = max(1, keep // 2)
    versions = sorted(v['timestamp'] for v in table.list_versions())
    if len(versions) > kept:
        # Cleanup takes an age, measured from when it runs: every version up to the newest `kept` is older.
        age = datetime.datetime.now() - versions[-kept - 1]
        table.optimize(cleanup_older_than=max(age, datetime.timedelta(milliseconds=1)), delete_unverified=True)
    return True


STORE = LanceDBStore
