"""Sharded tables: stable shards, every part written, sorted parts, read back in shard order."""

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms import write

SPEC = write.TableSpec('t', pa.schema([('doc_id', pa.string()), ('i', pa.int32()), ('v', pa.list_(pa.float32()))]),
                       'doc_id', ('doc_id', 'i'))


def rows(n_docs=20, per_doc=3):
    return [{'doc_id': f'd{d}', 'i': i, 'v': np.full(2, d + i / 10, np.float32)}
            for d in range(n_docs) for i in reversed(range(per_doc))]


def test_shard_of_is_a_fixed_function_of_the_key():
    # Pinned values: a change of the hash would silently reshuffle every output.
    assert [write.shard_of(k, 7) for k in ['a', 'doc0000001', 'sub/orbits.md', '']] == [2, 4, 0, 2]
    assert write.shard_of('pasta.txt', 1000) == 433
    assert write.shard_of('a', 1) == 0
    spread = {write.shard_of(f'doc{i}', 8) for i in range(200)}
    assert spread == set(range(8))


def test_default_num_shards_follows_the_input_size():
    assert write.default_num_shards(0) == 1
    assert write.default_num_shards(write.SHARD_INPUT_BYTES) == 1
    assert write.default_num_shards(write.SHARD_INPUT_BYTES + 1) == 2
    assert write.default_num_shards(10**15) == write.MAX_DEFAULT_SHARDS


def test_table_spec_checks_its_columns():
    with pytest.raises(ValueError, match='no column'):
        write.TableSpec('t', SPEC.schema, 'nope', ('doc_id',))


def test_write_parts_then_read_table_in_shard_order(tmp_path):
    write.write_parts(rows(), SPEC, str(tmp_path), 4)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f'part-0000{i}-of-00004.parquet' for i in range(4)]
    table = write.read_table(str(tmp_path), ['doc_id', 'i'])
    got = list(zip(table.column('doc_id').to_pylist(), table.column('i').to_pylist()))
    expected = sorted(((r['doc_id'], r['i']) for r in rows()), key=lambda k: (write.shard_of(k[0], 4), k))
    assert got == expected


def test_part_paths_refuses_an_incomplete_set(tmp_path):
    write.write_parts(rows(), SPEC, str(tmp_path), 3)
    (tmp_path / 'part-00001-of-00003.parquet').unlink()
    with pytest.raises(ValueError, match='exactly the parts'):
        write.read_table(str(tmp_path))
    with pytest.raises(ValueError, match='holds no'):
        write.read_table(str(tmp_path / 'missing'))


def test_unique_table_keeps_one_row_per_key():
    spec = write.TableSpec('c', pa.schema([('key', pa.string()), ('value', pa.int64())]), 'key', ('key',),
                           unique=True)
    table = write.part_table([{'key': 'b', 'value': 2}, {'key': 'a', 'value': 1}, {'key': 'b', 'value': 2}], spec)
    assert table.to_pylist() == [{'key': 'a', 'value': 1}, {'key': 'b', 'value': 2}]


def test_write_table_transform_writes_every_part_with_the_same_bytes(tmp_path):
    with TestPipeline() as p:
        counts = p | beam.Create(rows(n_docs=3)) | write.WriteTable(SPEC, str(tmp_path / 'beam'), 5)
        assert_that(counts | beam.CombineGlobally(sum), equal_to([9]))
    write.write_parts(rows(n_docs=3), SPEC, str(tmp_path / 'local'), 5)
    beam_parts = sorted((tmp_path / 'beam').iterdir())
    assert [p.name for p in beam_parts] == [f'part-0000{i}-of-00005.parquet' for i in range(5)]
    # 3 documents in 5 parts: some parts are empty, and written all the same.
    assert any(pq.read_metadata(p).num_rows == 0 for p in beam_parts)
    for part in beam_parts:
        assert part.read_bytes() == (tmp_path / 'local' / part.name).read_bytes()
