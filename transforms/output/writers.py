"""Beam writers of the output tables and the index composite."""

from __future__ import annotations

import io
import posixpath
import time
from typing import Iterable, Mapping

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.metrics import Metrics

from transforms import progress
from transforms.output.tables import (
    CHUNKS_TABLE,
    DOCUMENTS_TABLE,
    DROPPED_TABLE,
    REJECTED_TABLE,
    TableSpec,
    chunk_row,
    document_row,
    dropped_row,
    part_name,
    part_table,
    rejected_row,
    shard_of,
)
from transforms.storage import write_bytes


def write_parts(rows: Iterable[Mapping], spec: TableSpec, directory: str, num_shards: int) -> None:
    """Writes a table whose rows are all here (small tables, evaluation), parts as a pipeline would."""
    by_shard: dict[int, list] = {s: [] for s in range(num_shards)}
    for row in rows:
        by_shard[shard_of(spec.shard_key(row), num_shards)].append(row)
    for shard, shard_rows in by_shard.items():
        write_table(part_table(shard_rows, spec), posixpath.join(directory, part_name(shard, num_shards)))


def write_table(table: pa.Table, path: str) -> None:
    """Writes a Parquet file to any Beam filesystem, without timestamps in it."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression='zstd')
    write_bytes(path, buffer.getvalue())


def _keyed_by_shard(row: Mapping, spec: TableSpec, num_shards: int) -> tuple[int, Mapping]:
    return shard_of(spec.shard_key(row), num_shards), row


class _WritePartFn(beam.DoFn):
    """(shard, rows) -> one part file; yields the number of rows written."""

    def __init__(self, spec: TableSpec, directory: str, num_shards: int, namespace: str = 'write'):
        self._spec = spec
        self._directory = directory
        self._num_shards = num_shards
        self._rows = Metrics.counter(namespace, f'{spec.directory}_rows')
        self._msecs = Metrics.counter(namespace, 'msecs')
        self._parts = Metrics.counter(namespace, 'parts')
        self._live_parts = f'{namespace}.parts'  # progress.PARTS for the output tables
        self._live = progress.Tally()

    def process(self, element) -> Iterable[int]:
        started = time.perf_counter()
        shard, rows = element
        table = part_table((r for r in rows if r is not None), self._spec)
        write_table(table, posixpath.join(self._directory, part_name(shard, self._num_shards)))
        self._rows.inc(table.num_rows)
        self._msecs.inc(int((time.perf_counter() - started) * 1000))
        self._parts.inc()
        self._live.count(self._live_parts)
        yield table.num_rows

    def finish_bundle(self):
        self._live.flush()


class WriteTable(beam.PTransform):
    """PCollection[dict] (rows of `spec.schema`) -> PCollection[int]: rows written, one per part.

    Rows are keyed by the stable hash of their shard column and grouped per
    part; each part is sorted and written by whichever worker holds its
    group, so a worker holds one part, never the table. Every part of
    `num_shards` is written, empty ones too: the file set is fixed, and the
    bytes depend only on the rows and the shard count. Its counters are under
    `namespace`: `write` (`progress.PARTS`, the parts the build's meter
    counts) for the output tables, another for other tables (the feature
    cache's), which the meter's total does not include.
    """

    def __init__(self, spec: TableSpec, directory: str, num_shards: int, namespace: str = 'write'):
        super().__init__()
        if num_shards < 1:
            raise ValueError(f'num_shards must be >= 1, got {num_shards}')
        self._spec = spec
        self._directory = directory
        self._num_shards = num_shards
        self._namespace = namespace

    def expand(self, rows):
        keyed = rows | 'KeyByShard' >> beam.Map(_keyed_by_shard, self._spec, self._num_shards)
        # A None per shard: empty parts get a group, and a file, too.
        every = rows.pipeline | 'EveryShard' >> beam.Create([(s, None) for s in range(self._num_shards)])
        return (
            (keyed, every)
            | 'WithEveryShard' >> beam.Flatten()
            | 'GroupByShard' >> beam.GroupByKey()
            | 'WritePart' >> beam.ParDo(_WritePartFn(self._spec, self._directory, self._num_shards, self._namespace))
        )


# The tables WriteIndex writes: input key, table, element -> row.
OUTPUT_TABLES = (
    ('chunks', CHUNKS_TABLE, chunk_row),
    ('rejected', REJECTED_TABLE, rejected_row),
    ('dropped', DROPPED_TABLE, dropped_row),
    ('documents', DOCUMENTS_TABLE, document_row),
)


class WriteIndex(beam.PTransform):
    """Writes chunks/, rejected/, dropped/ and documents/ under `output`, then index/ and bm25/.

    Input: a dict with 'chunks' (PCollection[Chunk] with embeddings: the kept
    chunks), 'rejected' (PCollection[Rejected]) and optionally 'dropped'
    (PCollection[Dropped]) and 'documents' (PCollection[Document]); each
    optional table is written, possibly empty, whenever its key is present.
    Every table is written in `num_shards` parts by `WriteTable`; the FAISS
    and BM25 indexes are then assembled from the written chunk parts (see
    `transforms.indexes`). Returns the PCollections of rows written per part,
    by table, and 'indexes'.
    """

    def __init__(self, output: str, dim: int, num_shards: int, index_config=None):
        super().__init__()
        from transforms.output.indexes import IndexConfig

        self._output = output
        self._dim = dim
        self._num_shards = num_shards
        self._index_config = index_config or IndexConfig()

    def expand(self, pcolls):
        from transforms.output.indexes import BuildIndexes

        outputs = {}
        for key, spec, to_row in OUTPUT_TABLES:
            if key not in pcolls:
                continue
            name = key.title()
            outputs[key] = (
                pcolls[key]
                | f'{name}Rows' >> beam.Map(to_row)
                | f'Write{name}' >> WriteTable(spec, posixpath.join(self._output, spec.directory), self._num_shards)
            )
        outputs['indexes'] = outputs['chunks'] | 'BuildIndexes' >> BuildIndexes(
            self._output, self._dim, self._index_config)
        return outputs
