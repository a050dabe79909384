"""Milvus Lite: `milvus://PATH.db[?table=NAME]`, Milvus's embedded form (a client for a server: `milvus://HOST:PORT`).

Vectors are FLOAT_VECTOR with a FLAT inner-product index (exact); strings are
VARCHAR, metadata and salience nullable. Milvus Lite opens a database in one
process at a time, so its sync lock (`PATH.db.sync-lock`, beside it) guards
the whole database, and is taken before the database is opened. A Milvus
server has no lock ragsieve can hold: one sync at a time is the caller's
to ensure there.

No write is fenced: Milvus has no conditional write (no collection
version, no transaction), so a sync paused past the loss of its lock may
still land the write it had begun. On Milvus Lite that write never lands
over another sync's: the paused sync keeps the database open, and Milvus
Lite's own lock (`PATH.db/LOCK`) refuses any other process meanwhile.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.sync import locks, rows
from transforms.sync.store import Store, StoreError, no_lock

MARKER_SUFFIX = '_sync'
LOCK_SUFFIX = '.sync-lock'
# Milvus's VARCHAR limit; a server counts UTF-8 bytes (Milvus Lite characters): bytes are checked.
VARCHAR_BYTES = 65535
# The short VARCHAR columns, and their limits.
_SHORT = {'kind': 64, rows.RUN_ID: 256, rows.ROW_HASH: 64}
# Milvus's largest query page: its iterator costs a query per page, each
# slower as the collection grows (measured on 20k rows: 21 s in pages of
# 1,000, 3 s in pages of 10,000).
_SCAN_PAGE = 16384
_SERVER = re.compile(r'^[A-Za-z0-9.-]+:\d+$')


# Loggers kept to CRITICAL: Milvus Lite answers AllocTimestamp (asked by an
# index wait and the query iterator) with "Method not implemented!", which
# its gRPC server logs with a traceback, and pymilvus logs every failed call
# before raising it, when a sync's own line says what failed.
_NOISY = ('grpc._server', 'pymilvus', 'pymilvus.milvus_client', 'milvus_lite')


def _silence() -> None:
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.CRITICAL)


class MilvusStore(Store):
    """A Milvus collection keyed by chunk_id; upserts replace whole rows."""

    SCHEMES = ('milvus',)

    def __init__(self, uri: str):
        super().__init__(uri)
        try:
            import pymilvus  # noqa: F401
        except ImportError:
            raise ValueError("milvus:// needs pymilvus and milvus-lite: pip install 'ragsieve[milvus]'") from None
        self.lite = self.target.endswith('.db')
        if not self.lite and not _SERVER.match(self.target):
            raise StoreError(f'{self.shown}: expected milvus://PATH.db (Milvus Lite) or milvus://HOST:PORT '
                             '(a Milvus server)')
        if self.lite and os.path.exists(self.target) and not os.path.isdir(self.target):
            raise StoreError(f'{self.shown}: {self.target} is a file, not a Milvus Lite database (a directory)')
        self._connection = None
        self._lock: Optional[locks.FileLock] = None
        self._dim = None
        _silence()

    @classmethod
    def table_problem(cls, name: str) -> Optional[str]:
        if name[:1].isdigit():
            return 'must start with a letter or _ (Milvus)'
        return super().table_problem(name)

    @property
    def _client(self):
        if self._connection is None:
            from pymilvus import MilvusClient
            from pymilvus.exceptions import MilvusException

            if self.lite:
                os.makedirs(os.path.dirname(os.path.abspath(self.target)), exist_ok=True)
            try:
                self._connection = MilvusClient(self.target if self.lite else f'http://{self.target}')
            except MilvusException as e:
                held = ' (Milvus Lite opens a database in one process at a time: is another using it?)'
                raise StoreError(f'cannot open {self.shown}: {e.message}{held if self.lite else ""}') from None
        return self._connection

    def _missing(self) -> bool:
        # A Milvus Lite database that is not there yet is not created by reading it.
        return self.lite and self._connection is None and not os.path.isdir(self.target)

    def lock(self, wait: float, holder: str):
        if not self.lite:
            return no_lock()
        self._lock = locks.file_lock(os.path.abspath(self.target) + LOCK_SUFFIX, self.shown, wait, holder)
        return self._lock

    def check_lock(self) -> None:
        if self._lock is not None:
            self._lock.check()

    def _schema(self, dim: int):
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field('chunk_id', DataType.VARCHAR, max_length=VARCHAR_BYTES, is_primary=True)
        schema.add_field('doc_id', DataType.VARCHAR, max_length=VARCHAR_BYTES)
        schema.add_field('text', DataType.VARCHAR, max_length=VARCHAR_BYTES)
        schema.add_field('embedding', DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field('metadata', DataType.VARCHAR, max_length=VARCHAR_BYTES, nullable=True)
        schema.add_field('kind', DataType.VARCHAR, max_length=_SHORT['kind'])
        schema.add_field('salience', DataType.FLOAT, nullable=True)
        schema.add_field(rows.RUN_ID, DataType.VARCHAR, max_length=_SHORT[rows.RUN_ID])
        schema.add_field(rows.ROW_HASH, DataType.VARCHAR, max_length=_SHORT[rows.ROW_HASH])
        return schema

    def _loaded(self, name: str) -> bool:
        """Whether collection `name` is there, loaded: a reopened Milvus Lite database has them all released."""
        if not self._client.has_collection(name):
            return False
        if str(self._client.get_load_state(name).get('state')) != 'Loaded':
            self._client.load_collection(name)
        return True

    def prepare(self, dim: int, create: bool) -> bool:
        self._dim = dim
        if self._missing() and not create:
            return False
        marker = self.table + MARKER_SUFFIX
        if self._client.has_collection(marker):
            names = {f['name'] for f in self._client.describe_collection(marker)['fields']}
            if names != {'one', 'marker', 'unused'}:
                raise StoreError(f'{self.shown}: collection {marker!r} is not a ragsieve marker (its fields: '
                                 f'{sorted(names)}); drop it or sync into another ?table=')
        if self._loaded(self.table):
            fields = {f['name']: f for f in self._client.describe_collection(self.table)['fields']}
            found = fields.get('embedding', {}).get('params', {}).get('dim')
            if set(fields) != set(rows.COLUMNS) or found != dim:
                raise StoreError(f'{self.shown}: collection {self.table!r} is not the {dim}-dimensional rows of '
                                 f'ragsieve (fields {sorted(fields)}, {found}-dimensional vectors); drop it or '
                                 'sync into another ?table=')
            return True
        if not create:
            return False
        index = self._client.prepare_index_params()
        index.add_index('embedding', index_type='FLAT', metric_type='IP')
        self._client.create_collection(self.table, schema=self._schema(dim), index_params=index)
        return True

    def scan(self, columns: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        schema = rows.store_schema(self._dim)
        found = self._client.query_iterator(self.table, batch_size=_SCAN_PAGE,
                                            output_fields=list(columns))
        while True:
            page = found.next()
            if not page:
                found.close()
                return
            table = {c: [r[c] for r in page] for c in columns}
            if 'embedding' in table:
                matrix = np.asarray(table['embedding'], np.float32).reshape(-1)
                table['embedding'] = pa.FixedSizeListArray.from_arrays(pa.array(matrix, pa.float32()), self._dim)
            yield pa.table({c: table[c] if c == 'embedding' else pa.array(table[c], schema.field(c).type)
                            for c in columns})

    def upsert(self, table: pa.Table) -> None:
        records = table.drop_columns(['embedding']).to_pylist()
        for record, vector in zip(records, rows.vector_matrix(table.column('embedding'))):
            record['embedding'] = vector.tolist()  # float32 values as doubles: exact both ways
        self._client.upsert(self.table, records)

    def delete(self, chunk_ids: Sequence[str]) -> None:
        self._client.delete(self.table, ids=list(chunk_ids))

    def unholdable(self, table: pa.Table) -> list[Optional[str]]:
        limits = {c: VARCHAR_BYTES for c in ('chunk_id', 'doc_id', 'text', 'metadata')}
        limits.update(_SHORT)
        return rows.too_long(table, limits, 'Milvus VARCHAR')

    def _marker_collection(self, create: bool) -> Optional[str]:
        from pymilvus import DataType, MilvusClient

        name = self.table + MARKER_SUFFIX
        if self._missing() or self._loaded(name):
            return None if self._missing() else name
        if not create:
            return None
        # Milvus wants a vector in every collection: a 2-d one nobody reads.
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field('one', DataType.INT64, is_primary=True)
        schema.add_field('marker', DataType.VARCHAR, max_length=VARCHAR_BYTES)
        schema.add_field('unused', DataType.FLOAT_VECTOR, dim=2)
        index = self._client.prepare_index_params()
        index.add_index('unused', index_type='FLAT', metric_type='L2')
        self._client.create_collection(name, schema=schema, index_params=index)
        return name

    def read_marker(self) -> Any:
        name = self._marker_collection(create=False)
        if name is None:
            return None
        found = self._client.query(name, filter='one == 1', output_fields=['marker'])
        if not found:
            return None
        try:
            return json.loads(found[0]['marker'])
        except ValueError:
            return found[0]['marker']

    def write_marker(self, marker: dict) -> None:
        self._client.upsert(self._marker_collection(create=True),
                            [{'one': 1, 'marker': json.dumps(marker, sort_keys=True), 'unused': [0.0, 0.0]}])

    def search(self, vector: np.ndarray, k: int) -> list[str]:
        hits = self._client.search(self.table, data=[np.asarray(vector, np.float32).tolist()], limit=k,
                                   search_params={'metric_type': 'IP'}, output_fields=['chunk_id'])
        return [h['entity']['chunk_id'] for h in hits[0]]

    def upkeep(self, changed: int, rows: int) -> None:
        # Seals what the sync wrote into segments with their index, which loading would build otherwise:
        # a `--verify` after it then writes nothing.
        for name in (self.table, self.table + MARKER_SUFFIX):
            if self._client.has_collection(name):
                self._client.flush(name)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


STORE = MilvusStore
