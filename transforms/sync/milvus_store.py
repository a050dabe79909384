"""Milvus Lite: `milvus://PATH.db[?table=NAME]`, Milvus's embedded form (a client for a server: `milvus://HOST:PORT`).

Vectors are FLOAT_VECTOR with a FLAT inner-product index (exact); strings are
VARCHAR, metadata and salience nullable.
"""

from __future__ import annotations

import json
from typing import Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.sync import rows
from transforms.sync.store import Store, StoreError

MARKER_SUFFIX = '_sync'
_VARCHAR = 65535
# Milvus's largest query page: its iterator costs a query per page, each
# slower as the collection grows (measured on 20k rows: 21 s in pages of
# 1,000, 3 s in pages of 10,000).
_SCAN_PAGE = 16384


class MilvusStore(Store):
    """A Milvus collection keyed by chunk_id; upserts replace whole rows."""

    SCHEMES = ('milvus',)

    def __init__(self, uri: str):
        super().__init__(uri)
        try:
            from pymilvus import MilvusClient
        except ImportError:
            raise ValueError("milvus:// needs pymilvus and milvus-lite: pip install 'ragsieve[milvus]'") from None
        self._client = MilvusClient(self.target if self.target.endswith('.db') else f'http://{self.target}')
        self._dim = None

    def _schema(self, dim: int):
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field('chunk_id', DataType.VARCHAR, max_length=_VARCHAR, is_primary=True)
        schema.add_field('doc_id', DataType.VARCHAR, max_length=_VARCHAR)
        schema.add_field('text', DataType.VARCHAR, max_length=_VARCHAR)
        schema.add_field('embedding', DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field('metadata', DataType.VARCHAR, max_length=_VARCHAR, nullable=True)
        schema.add_field('kind', DataType.VARCHAR, max_length=64)
        schema.add_field('salience', DataType.FLOAT, nullable=True)
        schema.add_field(rows.RUN_ID, DataType.VARCHAR, max_length=256)
        schema.add_field(rows.ROW_HASH, DataType.VARCHAR, max_length=64)
        return schema

    def prepare(self, dim: int) -> None:
        if self._client.has_collection(self.table):
            fields = {f['name']: f for f in self._client.describe_collection(self.table)['fields']}
            if set(fields) != set(rows.COLUMNS) or fields['embedding'].get('params', {}).get('dim') != dim:
                raise StoreError(f'collection {self.table!r} is not the {dim}-dimensional rows of ragsieve; '
                                 'sync into another ?table=')
        else:
            index = self._client.prepare_index_params()
            index.add_index('embedding', index_type='FLAT', metric_type='IP')
            self._client.create_collection(self.table, schema=self._schema(dim), index_params=index)
        self._dim = dim

    def scan(self, columns: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        schema = rows.store_schema(self._dim)
        found = self._client.query_iterator(self.table, batch_size=max(batch_rows, _SCAN_PAGE),
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

    def _marker_collection(self) -> str:
        from pymilvus import DataType, MilvusClient

        name = self.table + MARKER_SUFFIX
        if not self._client.has_collection(name):
            # Milvus wants a vector in every collection: a 2-d one nobody reads.
            schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field('one', DataType.INT64, is_primary=True)
            schema.add_field('marker', DataType.VARCHAR, max_length=_VARCHAR)
            schema.add_field('unused', DataType.FLOAT_VECTOR, dim=2)
            index = self._client.prepare_index_params()
            index.add_index('unused', index_type='FLAT', metric_type='L2')
            self._client.create_collection(name, schema=schema, index_params=index)
        return name

    def read_marker(self) -> Optional[dict]:
        found = self._client.query(self._marker_collection(), filter='one == 1', output_fields=['marker'])
        return json.loads(found[0]['marker']) if found else None

    def write_marker(self, marker: dict) -> None:
        self._client.upsert(self._marker_collection(),
                            [{'one': 1, 'marker': json.dumps(marker, sort_keys=True), 'unused': [0.0, 0.0]}])

    def search(self, vector: np.ndarray, k: int) -> list[str]:
        hits = self._client.search(self.table, data=[np.asarray(vector, np.float32).tolist()], limit=k,
                                   search_params={'metric_type': 'IP'}, output_fields=['chunk_id'])
        return [h['entity']['chunk_id'] for h in hits[0]]

    def close(self) -> None:
        self._client.close()


STORE = MilvusStore
