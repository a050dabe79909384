"""Sharded tables: stable shards, shard counts, checked specs, and only complete sets of parts read."""

import pyarrow as pa
import pytest

from tests.helpers import SPEC, make, rows
from transforms.output import tables
from transforms.output.writers import write_parts


def test_shard_of_is_a_fixed_function_of_the_key():
    # Pinned values: a change of the hash would silently reshuffle every output.
    assert [tables.shard_of(k, 7) for k in ['a', 'doc0000001', 'sub/orbits.md', '']] == [2, 4, 0, 2]
    assert tables.shard_of('pasta.txt', 1000) == 433
    assert tables.shard_of('a', 1) == 0
    spread = {tables.shard_of(f'doc{i}', 8) for i in range(200)}
    assert spread == set(range(8))


def test_default_num_shards_follows_the_input_size():
    assert tables.default_num_shards(0) == 1
    assert tables.default_num_shards(tables.SHARD_INPUT_BYTES) == 1
    assert tables.default_num_shards(tables.SHARD_INPUT_BYTES + 1) == 2
    assert tables.default_num_shards(10**15) == tables.MAX_SHARDS


def test_table_spec_checks_its_columns():
    with pytest.raises(ValueError, match='no column'):
        tables.TableSpec('t', SPEC.schema, 'nope', ('doc_id',))


def test_part_paths_refuses_an_incomplete_set(tmp_path):
    write_parts(rows(), SPEC, str(tmp_path), 3)
    (tmp_path / 'part-00001-of-00003.parquet').unlink()
    with pytest.raises(ValueError, match='exactly the parts'):
        tables.read_table(str(tmp_path))
    with pytest.raises(ValueError, match='holds no'):
        tables.read_table(str(tmp_path / 'missing'))


def test_unique_table_keeps_one_row_per_key():
    spec = tables.TableSpec('c', pa.schema([('key', pa.string()), ('value', pa.int64())]), 'key', ('key',),
                           unique=True)
    table = tables.part_table([{'key': 'b', 'value': 2}, {'key': 'a', 'value': 1}, {'key': 'b', 'value': 2}], spec)
    assert table.to_pylist() == [{'key': 'a', 'value': 1}, {'key': 'b', 'value': 2}]


def test_table_problem_names_what_cannot_be_read_from_the_footers(tmp_path):
    directory = tmp_path / 't'
    write_parts(rows(), SPEC, str(directory), 3)
    assert tables.table_problem(str(directory), ('doc_id', 'v')) is None
    assert tables.table_problem(str(directory), ('doc_id', 'text')) == (
        f"{directory}/part-00000-of-00003.parquet has no column(s) ['text']")
    (directory / 'part-00001-of-00003.parquet').write_bytes(b'junk')
    problem = tables.table_problem(str(directory))
    assert problem.startswith(f'{directory}/part-00001-of-00003.parquet is corrupt or unreadable'), problem
    for part in directory.iterdir():
        part.unlink()
    (directory / 'notes.txt').write_text('not a part')
    assert tables.table_problem(str(directory)) == f'{directory} holds no part-*.parquet files'
    (directory / 'notes.txt').unlink()
    # An empty directory is a missing one, as on an object store, where no directory outlives its files.
    assert tables.table_problem(str(directory)) == f'{directory} is missing'
    assert tables.table_problem(str(tmp_path / 'nothing')) == f'{tmp_path / "nothing"} is missing'


@pytest.mark.parametrize('embedding', [[float('nan'), 0.0], [3e15, 4e15]])
def test_no_vector_enters_chunks_that_is_not_a_finite_unit_vector(embedding):
    chunk = make('doc', 0, 'text', embedding=embedding)
    with pytest.raises(ValueError, match=r"chunk 'doc#0': its embedding is not indexed: "):
        tables.chunk_row(chunk)
    assert tables.chunk_row(make('doc', 0, 'text', embedding=[0.6, 0.8]))['embedding'].tolist() == pytest.approx([0.6, 0.8])
