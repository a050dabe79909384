"""PostgreSQL with pgvector: `postgresql://USER@HOST:PORT/DB[?table=NAME]`, a real server.

Rows go in by binary COPY into a temporary table, then one `INSERT ... ON
CONFLICT (chunk_id) DO UPDATE` in the same transaction (not `DO NOTHING`: a
changed chunk must replace its row). Vectors are `vector(dim)` (float4, so
they round-trip bit for bit); metadata is `text`, kept byte for byte (cast
it `::jsonb` to query it).
"""

from __future__ import annotations

import json
from typing import Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.sync import rows
from transforms.sync.store import Store, StoreError

_TYPES = {'chunk_id': 'text', 'doc_id': 'text', 'text': 'text', 'embedding': 'vector', 'metadata': 'text',
          'kind': 'text', 'salience': 'float4', 'run_id': 'text', 'row_hash': 'text'}


class PgvectorStore(Store):
    """A PostgreSQL table with a pgvector column; every write is one transaction."""

    SCHEMES = ('postgresql', 'postgres')

    def __init__(self, uri: str):
        super().__init__(uri)
        try:
            import psycopg
            from pgvector.psycopg import register_vector
        except ImportError:
            raise ValueError("postgresql:// needs psycopg and pgvector: pip install 'ragsieve[pgvector]'") from None
        try:
            self._conn = psycopg.connect(self.location)
        except psycopg.Error as e:
            raise ValueError(f'cannot connect to {self.location}: {str(e).strip().splitlines()[0]}') from None
        self._register = register_vector
        self._dim = None

    def _ddl(self, dim: int) -> list[str]:
        columns = ', '.join([
            'chunk_id text PRIMARY KEY', 'doc_id text NOT NULL', 'text text NOT NULL',
            f'embedding vector({dim}) NOT NULL', 'metadata text', 'kind text NOT NULL', 'salience real',
            'run_id text NOT NULL', 'row_hash text NOT NULL'])
        return [
            'CREATE EXTENSION IF NOT EXISTS vector',
            f'CREATE TABLE IF NOT EXISTS {self.table} ({columns})',
            f'CREATE TABLE IF NOT EXISTS {self.table}_sync (one boolean PRIMARY KEY DEFAULT true CHECK (one), '
            'marker jsonb NOT NULL)',
        ]

    def prepare(self, dim: int) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            for statement in self._ddl(dim):
                cur.execute(statement)
            cur.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                (self.table,))
            found = cur.fetchall()
        expected = [(c, 'vector(%d)' % dim if c == 'embedding' else t.replace('float4', 'real'))
                    for c, t in _TYPES.items()]
        if found != expected:
            raise StoreError(f'table {self.table!r} has columns {found}, not the {dim}-dimensional rows of '
                             'ragsieve; sync into another ?table=')
        self._register(self._conn)
        self._dim = dim

    def scan(self, columns: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        schema = rows.store_schema(self._dim)
        with self._conn.transaction(), self._conn.cursor(name='ragsieve_scan') as cur:
            cur.itersize = batch_rows
            cur.execute(f'SELECT {", ".join(columns)} FROM {self.table}')
            while True:
                page = cur.fetchmany(batch_rows)
                if not page:
                    return
                values = list(zip(*page))
                yield pa.table({c: self._column(c, v, schema) for c, v in zip(columns, values)})

    def _column(self, name: str, values: Sequence, schema: pa.Schema) -> pa.Array:
        if name != 'embedding':
            return pa.array(values, schema.field(name).type)
        # pgvector hands back `Vector`s (binary) or arrays: float4 either way, exact.
        matrix = np.stack([v.to_numpy() if hasattr(v, 'to_numpy') else v for v in values]).astype(np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1), pa.float32()), self._dim)

    def upsert(self, table: pa.Table) -> None:
        names = [c for c in _TYPES]
        vectors = rows.vector_matrix(table.column('embedding'))
        columns = {c: table.column(c).to_pylist() for c in names if c != 'embedding'}
        updates = ', '.join(f'{c} = EXCLUDED.{c}' for c in names if c != 'chunk_id')
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(f'CREATE TEMP TABLE _ragsieve_batch (LIKE {self.table}) ON COMMIT DROP')
            with cur.copy(f'COPY _ragsieve_batch ({", ".join(names)}) FROM STDIN WITH (FORMAT BINARY)') as copy:
                copy.set_types([_TYPES[c] for c in names])
                for i in range(table.num_rows):
                    copy.write_row([vectors[i] if c == 'embedding' else columns[c][i] for c in names])
            cur.execute(f'INSERT INTO {self.table} SELECT * FROM _ragsieve_batch '
                        f'ON CONFLICT (chunk_id) DO UPDATE SET {updates}')

    def delete(self, chunk_ids: Sequence[str]) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(f'DELETE FROM {self.table} WHERE chunk_id = ANY(%s)', (list(chunk_ids),))

    def read_marker(self) -> Optional[dict]:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(f'SELECT marker FROM {self.table}_sync')
            row = cur.fetchone()
        return None if row is None else row[0]

    def write_marker(self, marker: dict) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(f'INSERT INTO {self.table}_sync (marker) VALUES (%s) '
                        'ON CONFLICT (one) DO UPDATE SET marker = EXCLUDED.marker', (json.dumps(marker),))

    def search(self, vector: np.ndarray, k: int) -> list[str]:
        with self._conn.transaction(), self._conn.cursor() as cur:
            # <#> is the negative inner product; without an index the scan is exact.
            cur.execute(f'SELECT chunk_id FROM {self.table} ORDER BY embedding <#> %s, chunk_id LIMIT %s',
                        (np.asarray(vector, np.float32), k))
            return [r[0] for r in cur.fetchall()]

    def close(self) -> None:
        self._conn.close()


STORE = PgvectorStore
