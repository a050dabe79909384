"""LanceDB, the embedded default: `lancedb://PATH[?table=NAME]`, no server, Arrow in and out."""

from __future__ import annotations

import json
from typing import Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms.sync import rows
from transforms.sync.store import Store, StoreError

MARKER_SUFFIX = '_sync'
# Ids per delete predicate: Lance parses the IN list as SQL.
_DELETE_IDS = 1000


def _quoted(chunk_id: str) -> str:
    return "'" + chunk_id.replace("'", "''") + "'"


class LanceDBStore(Store):
    """A LanceDB table; upserts are one `merge_insert` on chunk_id, each a commit of its own."""

    SCHEMES = ('lancedb',)

    def __init__(self, uri: str):
        super().__init__(uri)
        try:
            import lancedb
        except ImportError:
            raise ValueError("lancedb:// needs the LanceDB client: pip install 'ragsieve[lancedb]'") from None
        self._db = lancedb.connect(self.target)
        self._table = None

    def _names(self) -> set:
        result = self._db.list_tables()
        return set(getattr(result, 'tables', result))

    def prepare(self, dim: int) -> None:
        schema = rows.store_schema(dim)
        if self.table in self._names():
            self._table = self._db.open_table(self.table)
            if self._table.schema != schema:
                raise StoreError(f'{self.target}: table {self.table!r} has columns {self._table.schema}, not the '
                                 f'{dim}-dimensional rows of ragsieve; sync into another ?table=')
        else:
            self._table = self._db.create_table(self.table, schema=schema)

    def scan(self, columns: Sequence[str], batch_rows: int) -> Iterator[pa.Table]:
        reader = self._table.search().select(list(columns)).limit(None).to_batches(batch_rows)
        for batch in reader:
            yield pa.Table.from_batches([batch])

    def upsert(self, table: pa.Table) -> None:
        (self._table.merge_insert('chunk_id').when_matched_update_all().when_not_matched_insert_all()
         .execute(table))

    def delete(self, chunk_ids: Sequence[str]) -> None:
        for start in range(0, len(chunk_ids), _DELETE_IDS):
            ids = ', '.join(_quoted(c) for c in chunk_ids[start:start + _DELETE_IDS])
            self._table.delete(f'chunk_id IN ({ids})')

    def _marker_table(self):
        name = self.table + MARKER_SUFFIX
        if name in self._names():
            return self._db.open_table(name)
        return None

    def read_marker(self) -> Optional[dict]:
        table = self._marker_table()
        if table is None or table.count_rows() == 0:
            return None
        return json.loads(table.to_arrow().column('marker')[0].as_py())

    def write_marker(self, marker: dict) -> None:
        data = pa.table({'marker': [json.dumps(marker, sort_keys=True)]})
        # One row, replaced whole: `mode='overwrite'` is one commit.
        self._db.create_table(self.table + MARKER_SUFFIX, data=data, mode='overwrite')

    def search(self, vector: np.ndarray, k: int) -> list[str]:
        hits = self._table.search(np.asarray(vector, np.float32)).metric('dot').limit(k).select(['chunk_id'])
        return [row['chunk_id'] for row in hits.to_list()]


STORE = LanceDBStore
