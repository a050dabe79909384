"""Store rows: the row hash Arrow computes equals the one of each row, the limits of a store, vectors by row group."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.sync import rows


def fields_table():
    return pa.table({
        'chunk_id': ['a#0', 'é\x00#1', 'c#2', '', 'e#4'],
        'doc_id': ['a', None, 'c', '', 'e'],
        'text': ['text', 'ünïcode ' * 50, '', '', 'x' * 70_000],
        'metadata': [None, '{}', '{"k": 1}', '', None],
        'kind': ['chunk', 'delta', 'chunk', 'chunk', 'chunk'],
        'salience': pa.array([None, 0.5, -0.0, 1e-30, float('inf')], pa.float32()),
    })


def test_row_hashes_equal_the_hash_of_each_row():
    table = fields_table()
    one_by_one = [rows.row_hash(*values, 'model+probe') for values in zip(*(table.column(c).to_pylist()
                                                                            for c in rows.FIELDS))]
    assert rows.row_hashes(table, 'model+probe') == one_by_one
    assert rows.row_hashes(table.slice(2), 'model+probe') == one_by_one[2:]  # an offset into Arrow's buffers
    assert len(set(one_by_one)) == len(one_by_one)


def test_the_limits_of_a_store_name_the_column():
    table = fields_table()
    nul = rows.with_nul(table, ['chunk_id', 'doc_id', 'text', 'row_hash'], 'PostgreSQL text')
    assert nul == [None, 'chunk_id holds a NUL character, which PostgreSQL text cannot store', None, None, None]
    long = rows.too_long(table, {'text': 65535, 'run_id': 10}, 'Milvus VARCHAR')
    assert long == [None] * 4 + ["text is 70000 bytes, over Milvus VARCHAR's 65535"]
    assert rows.merge_reasons(nul, long) == [None, nul[1], None, None, long[4]]


def test_vectors_are_read_for_the_rows_asked_only_from_their_row_groups(tmp_path):
    vectors = np.arange(40 * 4, dtype=np.float32).reshape(40, 4)
    table = pa.table({'embedding': pa.array(list(vectors), pa.list_(pa.float32()))})
    pq.write_table(table, tmp_path / 'part.parquet', row_group_size=10)
    found = rows.read_vectors(str(tmp_path / 'part.parquet'), [3, 27, 29, 5])
    assert np.array_equal(rows.vector_matrix(found), vectors[[3, 27, 29, 5]])


def test_a_schema_difference_says_what_differs():
    expected = rows.store_schema(384)
    assert rows.schema_difference(expected, expected) is None
    other = expected.remove(expected.get_field_index('kind')).append(pa.field('note', pa.string()))
    other = other.set(other.get_field_index('embedding'), pa.field('embedding', pa.list_(pa.float32(), 768)))
    assert rows.schema_difference(other, expected) == (
        "lacks ['kind']; has ['note'] besides; embedding is fixed_size_list<item: float>[768], "
        'not fixed_size_list<item: float>[384]')
