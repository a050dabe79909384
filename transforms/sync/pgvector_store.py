"""PostgreSQL with pgvector: `postgresql://USER@HOST:PORT/DB[?table=NAME]`, a real server.

Rows go in by binary COPY into a temporary table, then one `INSERT ... ON
CONFLICT (chunk_id) DO UPDATE` in the same transaction (not `DO NOTHING`: a
changed chunk must replace its row). Vectors are `vector(dim)` (float4, so
they round-trip bit for bit); metadata is `text`, kept byte for byte (cast
it `::jsonb` to query it). Names are quoted identifiers in the connection's
current schema. The sync lock is a session advisory lock, which the server
releases when the connection ends, the sync's process killed included.
Every write is a transaction made by `_fenced`: it checks there that its
connection holds the lock and takes the marker's row lock, conditional on
the row version this sync last read or wrote, and moves that version on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.sync import locks, rows
from transforms.sync.store import LockLost, Store, StoreError, first_line

_TYPES = {'chunk_id': 'text', 'doc_id': 'text', 'text': 'text', 'embedding': 'vector', 'metadata': 'text',
          'kind': 'text', 'salience': 'float4', 'run_id': 'text', 'row_hash': 'text'}
_TEXT = [c for c, t in _TYPES.items() if t == 'text']
MARKER_SUFFIX = '_sync'
# PostgreSQL's identifier limit (NAMEDATALEN - 1 bytes), which `NAME_sync` must fit.
_NAME_BYTES = 63
# A btree entry is at most 2704 bytes (a third of an 8 KB page) with an
# 8-byte tuple header and a 4-byte length: a longer chunk_id can fail its
# primary key's index (unless PostgreSQL happens to compress it).
KEY_BYTES = 2704 - 8 - 4
# The advisory lock's first key: 'rags'; the second is the table's (`_lock_key`).
_LOCK_CLASS = 0x72616773
# A change of at least this share of the table's rows is followed by ANALYZE (autovacuum's default).
ANALYZE_SHARE = 0.1


def _lock_key(schema: str, table: str) -> int:
    digest = hashlib.blake2b(f'{schema}.{table}'.encode('utf-8'), digest_size=4).digest()
    return int.from_bytes(digest, 'little') & 0x7FFFFFFF


class PgvectorStore(Store):
    """A PostgreSQL table with a pgvector column; every write is one transaction."""

    SCHEMES = ('postgresql', 'postgres')
    OPTIONS = None  # every other option is libpq's (sslmode, connect_timeout, ...)
    FENCED = True

    def __init__(self, uri: str):
        super().__init__(uri)
        try:
            import psycopg  # noqa: F401
            from pgvector.psycopg import register_vector  # noqa: F401
        except ImportError:
            raise ValueError("postgresql:// needs psycopg and pgvector: pip install 'ragsieve[pgvector]'") from None
        self._conn_ = None
        self._schema = None
        self._dim = None
        self._has_vector = False
        self._not_null_vectors = True
        self._has_marker = False
        self._locked = False
        # The marker row's version (its xmin) this sync last read or wrote; None: no row then. Every write moves it.
        self._marker_version: Optional[str] = None
        # The version the last write made, until its commit is known to have landed.
        self._pending_version: Optional[str] = None

    @classmethod
    def table_problem(cls, name: str) -> Optional[str]:
        if len((name + MARKER_SUFFIX).encode('utf-8')) > _NAME_BYTES:
            return f'is too long: NAME{MARKER_SUFFIX} must fit PostgreSQL\'s {_NAME_BYTES} bytes'
        return super().table_problem(name)

    def _connect(self):
        import psycopg

        name = f'ragsieve sync pid {os.getpid()} on {socket.gethostname()}'.encode('utf-8')[:_NAME_BYTES]
        try:
            conn = psycopg.connect(self.location, application_name=name.decode('utf-8', 'ignore'))
        except psycopg.Error as e:
            raise StoreError(f'cannot connect to {self.shown}: {self._first_line(e)}') from None
        with conn.transaction(), conn.cursor() as cur:
            cur.execute('SELECT current_schema()')
            self._schema = cur.fetchone()[0]
        if self._schema is None:
            conn.close()
            raise StoreError(f'{self.shown}: no schema of the search_path exists to hold table {self.table!r}')
        return conn

    def _first_line(self, error: Exception) -> str:
        return first_line(error, self.redact)

    @property
    def _conn(self):
        self._current_schema()  # connects
        return self._conn_

    def _name(self, suffix: str = ''):
        from psycopg import sql

        return sql.Identifier(self._current_schema(), self.table + suffix)

    def _current_schema(self) -> str:
        """The schema the table is in: the connection's first (its search_path), read when it connects."""
        if self._conn_ is None:
            self._conn_ = self._connect()
        return self._schema

    def _query(self, statement, params=(), fetch: bool = True):
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if fetch else None

    # --- the lock -------------------------------------------------------------------

    def _try_lock(self) -> bool:
        key = _lock_key(self._current_schema(), self.table)
        got = self._query('SELECT pg_try_advisory_lock(%s, %s)', (_LOCK_CLASS, key))[0][0]
        self._locked = self._locked or got
        return got

    def _holder(self) -> Optional[dict]:
        found = self._query(
            'SELECT a.pid, a.application_name, host(a.client_addr), a.backend_start FROM pg_locks l '
            'JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = %s AND l.classid = %s AND '
            'l.objid = %s AND l.objsubid = 2 AND l.granted',
            ('advisory', _LOCK_CLASS, _lock_key(self._current_schema(), self.table)))
        if not found:
            return None
        pid, name, address, started = found[0]
        return {'pid': f'{pid} (server)', 'host': address or 'a local socket',
                'since': started.isoformat(timespec='seconds') if started else '?', 'syncing': name or '?'}

    @contextlib.contextmanager
    def lock(self, wait: float, holder: str) -> Iterator[None]:
        import psycopg

        try:
            got = locks.retry_until(self._try_lock, wait)
            if not got:
                raise locks.refused(f'{self.shown} (table {self.table})', self._holder(), wait)
        except psycopg.Error as e:
            raise StoreError(f'{self.shown}: cannot take the sync lock: {self._first_line(e)}') from None
        try:
            yield
        finally:
            if self._conn_ is not None and not self._conn_.closed:
                with contextlib.suppress(psycopg.Error):
                    self._query('SELECT pg_advisory_unlock(%s, %s)',
                                (_LOCK_CLASS, _lock_key(self._current_schema(), self.table)))
            self._locked = False

    def recover(self) -> None:
        """Reconnects a lost connection and retakes the lock, unless another sync wrote meanwhile.

        Whether another sync wrote is read from the marker row's version,
        which every write moves (a value compared would miss a sync that
        wrote the same marker again, or rows and no marker); the version of
        this sync's own last write, committed though its answer was lost,
        is its own.

        Raises:
          LockLost: When another sync took the lock, or wrote the store, while this one was away.
        """
        if self._conn_ is not None and not (self._conn_.closed or self._conn_.broken):
            return
        if self._conn_ is not None:
            with contextlib.suppress(Exception):
                self._conn_.close()
        self._conn_ = None
        self._register()
        if self._locked:  # held by the lost session, which the server ended: retaken, or lost
            if not self._try_lock():
                raise LockLost(f'{self.shown}: lost its connection, and another sync took the lock meanwhile')
            if self._has_marker:
                now = self._marker_version_now()
                if now is not None and now == self._pending_version:
                    self._marker_version = now
                if now != self._marker_version:
                    raise LockLost(f'{self.shown}: lost its connection, and another sync wrote the store meanwhile')

    def _marker_version_now(self) -> Optional[str]:
        from psycopg import sql

        found = self._query(sql.SQL('SELECT xmin::text FROM {}').format(self._name(MARKER_SUFFIX)))
        return found[0][0] if found else None

    @contextlib.contextmanager
    def _fenced(self) -> Iterator[Any]:
        """The one commit point of a sync into PostgreSQL: a transaction whose cursor the block writes with.

        Fenced against a lost lock and another sync's writes, in the same
        transaction: its connection must hold the sync lock (a connection
        that lost it cannot commit; one behind a pooler that moved it to
        another is refused), and the marker's row, locked until the commit,
        must be at the version this sync last read or wrote. The write then
        moves that version on (the row is created holding no marker, JSON
        null, where there was none), so any sync that wrote since is seen.

        Raises:
          LockLost: When the lock is not held or another sync wrote: nothing of the block is committed.
        """
        from psycopg import sql

        marker = self._name(MARKER_SUFFIX)
        with self._conn.transaction(), self._conn.cursor() as cur:
            if self._locked:
                cur.execute('SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = %s AND classid = %s AND objid = %s '
                            'AND objsubid = 2 AND pid = pg_backend_pid() AND granted)',
                            ('advisory', _LOCK_CLASS, _lock_key(self._current_schema(), self.table)))
                if not cur.fetchone()[0]:
                    raise LockLost(f'{self.shown}: this connection no longer holds the sync lock')
            cur.execute(sql.SQL('SELECT xmin::text FROM {} FOR UPDATE').format(marker))
            found = cur.fetchall()
            now = found[0][0] if found else None
            if now != self._marker_version:
                raise LockLost(f'{self.shown}: the marker\'s row is {_at(now)}, not {_at(self._marker_version)} as '
                               'this sync last read or wrote it: another sync wrote the store')
            yield cur
            cur.execute(sql.SQL("INSERT INTO {0} (one, marker) VALUES (true, 'null') ON CONFLICT (one) DO UPDATE SET "
                                'marker = {0}.marker RETURNING xmin::text').format(marker))
            self._pending_version = cur.fetchone()[0]
        self._marker_version = self._pending_version

    # --- the table ------------------------------------------------------------------

    def _register(self) -> None:
        from pgvector.psycopg import register_vector

        if self._has_vector:
            register_vector(self._conn)

    def _columns(self, suffix: str = '') -> Optional[list[tuple[str, str, bool]]]:
        """`(name, type, not null)` of the table's columns, or None when there is no such table."""
        found = self._query('SELECT c.oid, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace '
                            'WHERE n.nspname = %s AND c.relname = %s', (self._current_schema(), self.table + suffix))
        if not found:
            return None
        oid, kind = found[0]
        if kind not in ('r', 'p'):
            raise StoreError(f'{self.shown}: {self.table + suffix!r} is not a table (relkind {kind!r}); '
                             'sync into another ?table=')
        return self._query('SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute '
                           'WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum', (oid,))

    def _keyed_on(self, suffix: str, column: str) -> bool:
        return bool(self._query(
            'SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON '
            'n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0] '
            'WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indnkeyatts = 1 AND a.attname = %s',
            (self._current_schema(), self.table + suffix, column)))

    def _ddl(self, dim: int) -> list:
        from psycopg import sql

        columns = sql.SQL(', ').join(sql.SQL(c) for c in [
            'chunk_id text PRIMARY KEY', 'doc_id text NOT NULL', 'text text NOT NULL',
            f'embedding vector({int(dim)}) NOT NULL', 'metadata text', 'kind text NOT NULL', 'salience real',
            'run_id text NOT NULL', 'row_hash text NOT NULL'])
        return [
            sql.SQL('CREATE TABLE IF NOT EXISTS {} ({})').format(self._name(), columns),
            sql.SQL('CREATE TABLE IF NOT EXISTS {} (one boolean PRIMARY KEY DEFAULT true CHECK (one), '
                    'marker jsonb NOT NULL)').format(self._name(MARKER_SUFFIX)),
        ]

    def prepare(self, dim: int, create: bool) -> bool:
        import psycopg

        self._dim = dim
        try:
            return self._prepare(dim, create)
        except psycopg.Error as e:
            action = 'create' if create else 'read'
            raise StoreError(f'{self.shown}: cannot {action} table {self.table!r}: {self._first_line(e)}') from None

    def _prepare(self, dim: int, create: bool) -> bool:
        self._has_vector = bool(self._query("SELECT 1 FROM pg_extension WHERE extname = 'vector'"))
        marker = self._columns(MARKER_SUFFIX)
        if marker is not None and ([c[:2] for c in marker] != [('one', 'boolean'), ('marker', 'jsonb')]
                                   or not self._keyed_on(MARKER_SUFFIX, 'one')):
            raise StoreError(f'{self.shown}: table {self.table + MARKER_SUFFIX!r} is not a ragsieve marker '
                             f'(columns {[c[:2] for c in marker]}); drop it or sync into another ?table=')
        found = self._columns()
        if found is None and not create:
            return False
        if create and (found is None or marker is None):
            if not self._has_vector:
                self._query('CREATE EXTENSION IF NOT EXISTS vector', fetch=False)
                self._has_vector = True
            for statement in self._ddl(dim):
                self._query(statement, fetch=False)
            found, marker = self._columns(), True
        self._has_marker = marker is not None
        if self._has_marker:
            self._marker_version = self._marker_version_now()  # what this sync's writes are conditional on
        expected = [(c, 'vector(%d)' % dim if c == 'embedding' else t.replace('float4', 'real'))
                    for c, t in _TYPES.items()]
        if [c[:2] for c in found] != expected:
            difference = rows.schema_difference(dict(c[:2] for c in found), dict(expected))
            raise StoreError(f'{self.shown}: table {self.table!r} is not the {dim}-dimensional rows of ragsieve '
                             f'({difference}); drop it or sync into another ?table=')
        if not self._keyed_on('', 'chunk_id'):
            raise StoreError(f'{self.shown}: table {self.table!r} has no primary key (or unique index) on '
                             'chunk_id; add one, drop the table or sync into another ?table=')
        self._not_null_vectors = dict((c[0], c[2]) for c in found)['embedding']
        self._register()
        return True

    def scan(self, columns: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        from psycopg import sql

        schema = rows.store_schema(self._dim)
        with self._conn.transaction(), self._conn.cursor(name='ragsieve_scan') as cur:
            cur.itersize = batch_rows
            cur.execute(sql.SQL('SELECT {} FROM {}').format(sql.SQL(', ').join(map(sql.Identifier, columns)),
                                                           self._name()))
            while True:
                page = cur.fetchmany(batch_rows)
                if not page:
                    return
                values = list(zip(*page))
                yield pa.table({c: self._column(c, v, schema) for c, v in zip(columns, values)})

    def scan_hashes(self, page_rows: int) -> Iterator[tuple[list, list]]:
        from psycopg import sql

        with self._conn.transaction(), self._conn.cursor(name='ragsieve_hashes') as cur:
            cur.itersize = page_rows
            cur.execute(sql.SQL('SELECT chunk_id, row_hash FROM {}').format(self._name()))
            while True:
                page = cur.fetchmany(page_rows)
                if not page:
                    return
                chunk_ids, row_hashes = zip(*page)
                yield list(chunk_ids), list(row_hashes)

    def _column(self, name: str, values: Sequence, schema: pa.Schema) -> pa.Array:
        if name != 'embedding':
            return pa.array(values, schema.field(name).type)
        # pgvector hands back `Vector`s (binary) or arrays: float4 either way, exact.
        vectors = [None if v is None else np.asarray(v.to_numpy() if hasattr(v, 'to_numpy') else v, np.float32)
                   for v in values]
        if any(v is None for v in vectors):  # a table made without NOT NULL
            return pa.array(vectors, schema.field(name).type)
        flat = pa.array(np.stack(vectors).reshape(-1), pa.float32())
        return pa.FixedSizeListArray.from_arrays(flat, self._dim)

    def null_vector_ids(self) -> list[str]:
        from psycopg import sql

        if self._not_null_vectors:
            return []
        found = self._query(sql.SQL('SELECT chunk_id FROM {} WHERE embedding IS NULL').format(self._name()))
        return [r[0] for r in found]

    def unholdable(self, table: pa.Table) -> list[Optional[str]]:
        return rows.merge_reasons(rows.with_nul(table, _TEXT, 'PostgreSQL text'),
                                  rows.too_long(table, {'chunk_id': KEY_BYTES}, 'PostgreSQL\'s primary key index'))

    def upsert(self, table: pa.Table) -> None:
        from psycopg import sql

        names = list(_TYPES)
        vectors = rows.vector_matrix(table.column('embedding'))
        columns = {c: table.column(c).to_pylist() for c in names if c != 'embedding'}
        updates = sql.SQL(', ').join(sql.SQL('{0} = EXCLUDED.{0}').format(sql.Identifier(c)) for c in names[1:])
        with self._fenced() as cur:
            cur.execute(sql.SQL('CREATE TEMP TABLE _ragsieve_batch (LIKE {}) ON COMMIT DROP').format(self._name()))
            with cur.copy(sql.SQL('COPY _ragsieve_batch ({}) FROM STDIN WITH (FORMAT BINARY)').format(
                    sql.SQL(', ').join(map(sql.Identifier, names)))) as copy:
                copy.set_types([_TYPES[c] for c in names])
                for i in range(table.num_rows):
                    copy.write_row([vectors[i] if c == 'embedding' else columns[c][i] for c in names])
            cur.execute(sql.SQL('INSERT INTO {} SELECT * FROM _ragsieve_batch ON CONFLICT (chunk_id) DO UPDATE '
                                'SET {}').format(self._name(), updates))

    def delete(self, chunk_ids: Sequence[str]) -> None:
        from psycopg import sql

        with self._fenced() as cur:
            cur.execute(sql.SQL('DELETE FROM {} WHERE chunk_id = ANY(%s)').format(self._name()), (list(chunk_ids),))

    def read_marker(self) -> Any:
        from psycopg import sql

        if not self._has_marker:
            return None
        found = self._query(sql.SQL('SELECT marker FROM {}').format(self._name(MARKER_SUFFIX)))
        return found[0][0] if found else None

    def write_marker(self, marker: dict) -> None:
        from psycopg import sql

        with self._fenced() as cur:
            cur.execute(sql.SQL('INSERT INTO {} (one, marker) VALUES (true, %s) ON CONFLICT (one) DO UPDATE SET '
                                'marker = EXCLUDED.marker').format(self._name(MARKER_SUFFIX)), (json.dumps(marker),))

    def search(self, vector: np.ndarray, k: int) -> list[str]:
        from psycopg import sql

        # <#> is the negative inner product; without an index the scan is exact.
        found = self._query(sql.SQL('SELECT chunk_id FROM {} ORDER BY embedding <#> %s, chunk_id LIMIT %s').format(
            self._name()), (np.asarray(vector, np.float32), k))
        return [r[0] for r in found]

    def upkeep(self, changed: int, rows: int) -> None:
        from psycopg import sql

        # The planner's statistics follow a large change now, not when autovacuum gets to it.
        if changed and changed >= ANALYZE_SHARE * max(rows, 1):
            self._query(sql.SQL('ANALYZE {}').format(self._name()), fetch=False)

    def close(self) -> None:
        if self._conn_ is not None:
            self._conn_.close()
            self._conn_ = None


def _at(version: Optional[str]) -> str:
    return 'missing' if version is None else f'at version {version}'


STORE = PgvectorStore
