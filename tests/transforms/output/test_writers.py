"""Writing sharded tables: every part written, sorted parts, read back in shard order, the same bytes from Beam."""

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import SPEC, make, rows, unit
from transforms.output import tables
from transforms.output.writers import WriteIndex, WriteTable, write_parts


def test_write_parts_then_read_table_in_shard_order(tmp_path):
    write_parts(rows(), SPEC, str(tmp_path), 4)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f'part-0000{i}-of-00004.parquet' for i in range(4)]
    table = tables.read_table(str(tmp_path), ['doc_id', 'i'])
    got = list(zip(table.column('doc_id').to_pylist(), table.column('i').to_pylist()))
    expected = sorted(((r['doc_id'], r['i']) for r in rows()), key=lambda k: (tables.shard_of(k[0], 4), k))
    assert got == expected


def test_write_table_transform_writes_every_part_with_the_same_bytes(tmp_path):
    with TestPipeline() as p:
        counts = p | beam.Create(rows(n_docs=3)) | WriteTable(SPEC, str(tmp_path / 'beam'), 5)
        assert_that(counts | beam.CombineGlobally(sum), equal_to([9]))
    write_parts(rows(n_docs=3), SPEC, str(tmp_path / 'local'), 5)
    beam_parts = sorted((tmp_path / 'beam').iterdir())
    assert [p.name for p in beam_parts] == [f'part-0000{i}-of-00005.parquet' for i in range(5)]
    # 3 documents in 5 parts: some parts are empty, and written all the same.
    assert any(pq.read_metadata(p).num_rows == 0 for p in beam_parts)
    for part in beam_parts:
        assert part.read_bytes() == (tmp_path / 'local' / part.name).read_bytes()


def test_a_nan_vector_stops_the_index_with_one_line_naming_its_chunk(tmp_path):
    # Whatever computed it (a broken kernel, a damaged cache): the build fails, nothing is indexed.
    chunks = [make('d', 0, 'fine', embedding=unit(1, 0)), make('d', 1, 'broken', embedding=[np.nan, 0.0])]
    with pytest.raises(ValueError) as e:
        with TestPipeline() as p:
            _ = {'chunks': p | 'Chunks' >> beam.Create(chunks),
                 'rejected': p | 'Rejected' >> beam.Create([])} | WriteIndex(str(tmp_path), 2, 1)
    assert "chunk 'd#1': its embedding is not indexed: 1 of its 2 values are NaN or infinite" in str(e.value)
    assert not (tmp_path / 'index').exists()
