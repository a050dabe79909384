"""FAISS and BM25 assembled from written chunk parts: same results as from one list, any index type."""

import io

import faiss
import numpy as np
import pyarrow.parquet as pq
import pytest

from transforms.output import indexes, tables
from transforms.output.bm25 import bm25_files
from transforms.output.writers import write_parts

DIM = 8


def chunk_rows(n, seed=0, dim=DIM):
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = []
    for i, v in enumerate(vectors):
        row = {name: None for name in tables.CHUNK_SCHEMA.names}
        row.update(chunk_id=f'd{i // 4}#{i % 4}', doc_id=f'd{i // 4}', chunk_index=i % 4,
                   text=f'text number {i} about topic {i % 7}', embedding=v)
        rows.append(row)
    return rows


@pytest.fixture
def output(tmp_path):
    write_parts(chunk_rows(200), tables.CHUNKS_TABLE, str(tmp_path / 'chunks'), 4)
    return tmp_path


def table_vectors(output):
    table = tables.read_table(str(output / 'chunks'), ['chunk_id', 'embedding'])
    return table.column('chunk_id').to_pylist(), indexes.part_vectors(table, DIM)


def test_flat_from_parts_equals_one_flat_index_in_table_order(output):
    files = indexes.write_faiss(200, str(output), DIM, indexes.IndexConfig())
    assert files == 200
    index = faiss.read_index(str(output / 'index' / 'index.faiss'))
    ids, vectors = table_vectors(output)
    assert pq.read_table(output / 'index' / 'ids.parquet').column('chunk_id').to_pylist() == ids
    reference = faiss.IndexFlatIP(DIM)
    reference.add(vectors)
    assert faiss.serialize_index(index).tobytes() == faiss.serialize_index(reference).tobytes()


@pytest.mark.parametrize('n,dim,shards', [(0, DIM, 2), (1, DIM, 1), (1, 5, 3), (2, DIM, 4), (37, 13, 4), (300, 384, 6)])
def test_flat_written_part_by_part_is_the_file_faiss_writes_and_searches_alike(tmp_path, n, dim, shards):
    write_parts(chunk_rows(n, dim=dim), tables.CHUNKS_TABLE, str(tmp_path / 'chunks'), shards)
    assert indexes.write_faiss(n, str(tmp_path), dim, indexes.IndexConfig()) == n
    table = tables.read_table(str(tmp_path / 'chunks'), ['embedding'])
    vectors = indexes.part_vectors(table, dim)
    reference = indexes.new_index(dim, 'Flat')
    reference.add(vectors)
    faiss.write_index(reference, str(tmp_path / 'reference.faiss'))
    written = (tmp_path / 'index' / 'index.faiss').read_bytes()
    assert written == (tmp_path / 'reference.faiss').read_bytes()
    # ids.parquet is the bytes the in-memory path writes, and so is the index.
    ids = io.BytesIO()
    assembled = indexes.assemble_faiss(str(tmp_path / 'chunks'), dim, indexes.IndexConfig(), ids)
    assert (tmp_path / 'index' / 'ids.parquet').read_bytes() == ids.getvalue()
    assert faiss.serialize_index(assembled).tobytes() == written
    index = faiss.read_index(str(tmp_path / 'index' / 'index.faiss'))
    assert index.ntotal == n
    if n:
        found, expected = index.search(vectors[:10], min(n, 3)), reference.search(vectors[:10], min(n, 3))
        assert all(np.array_equal(a, b) for a, b in zip(found, expected))


def test_a_flat_layout_other_than_the_one_known_fails_loudly(monkeypatch):
    real = faiss.serialize_index
    monkeypatch.setattr(faiss, 'serialize_index',
                        lambda index: np.frombuffer(b'IxF2' + real(index).tobytes()[4:], 'uint8'))
    with pytest.raises(RuntimeError, match='not in the layout written part by part'):
        indexes.flat_header(DIM, 5)
    # The header as expected, the rows in another form.
    monkeypatch.setattr(faiss, 'serialize_index',
                        lambda index: np.frombuffer(real(index).tobytes() + b'\0' * bool(index.ntotal), 'uint8'))
    with pytest.raises(RuntimeError, match='other than as its header and rows'):
        indexes.flat_header(DIM, 5)


def test_a_flat_index_is_not_begun_when_the_parts_hold_other_rows_than_were_written(output):
    with pytest.raises(RuntimeError, match='the FAISS index holds 200 vectors, the chunk parts 201 rows'):
        indexes.write_faiss(201, str(output), DIM, indexes.IndexConfig())
    assert not (output / 'index').exists()


@pytest.mark.parametrize('index_type', ['HNSW8', 'IVF4,Flat', 'IVF4,PQ2x4'])
def test_other_index_types_are_deterministic_and_find_a_stored_vector(output, tmp_path, index_type):
    config = indexes.IndexConfig(index_type, train_size=150)
    first = indexes.assemble_faiss(str(output / 'chunks'), DIM, config, io.BytesIO())
    second = indexes.assemble_faiss(str(output / 'chunks'), DIM, config, io.BytesIO())
    assert faiss.serialize_index(first).tobytes() == faiss.serialize_index(second).tobytes()
    assert first.ntotal == 200
    _, vectors = table_vectors(output)
    faiss.ParameterSpace().set_index_parameter(first, 'nprobe' if 'IVF' in index_type else 'efSearch', 4)
    _, found = first.search(vectors[:20], 1)
    # PQ codes of 8 bits for 8 dimensions are too coarse to find the vector itself.
    assert (found[:, 0] == np.arange(20)).mean() >= (0.8 if 'PQ' not in index_type else 0.0)


def test_training_sample_is_bounded_and_fixed_by_the_chunk_ids(output):
    sample = indexes.training_sample(str(output / 'chunks'), DIM, 50)
    assert sample.shape == (50, DIM)
    ids, vectors = table_vectors(output)
    chosen = sorted(range(len(ids)), key=lambda i: indexes.sample_key(ids[i]))[:50]
    assert np.array_equal(sample, vectors[chosen])


@pytest.mark.parametrize('index_type,need', [('IVF512,Flat', 512), ('IVF4,PQ2x8', 256), ('PQ2', 256)])
def test_too_few_vectors_to_train_is_one_clear_line(output, index_type, need):
    with pytest.raises(ValueError) as e:
        indexes.assemble_faiss(str(output / 'chunks'), DIM, indexes.IndexConfig(index_type), io.BytesIO())
    assert str(e.value) == (f'cannot train a {index_type!r} index on the 200 vectors of this corpus (it needs at '
                            f'least {need}); choose a smaller index type for it, e.g. Flat or HNSW32')


@pytest.mark.parametrize('index_type,need', [
    ('Flat', 1), ('HNSW32', 1), ('SQ8', 1), ('IVF1024,Flat', 1024), ('IVF4096,PQ8', 4096), ('IVF16,PQ16x10', 1024),
    ('PQ16', 256), ('HNSW32,PQ8', 256), ('PCA64,IVF128,Flat', 128), ('IDMap,IVF16,Flat', 16), ('OPQ16,PQ16', 256),
])
def test_min_training_vectors(index_type, need):
    # Checked against FAISS: training on `need` vectors works, on one fewer it fails.
    assert indexes.min_training_vectors(indexes.new_index(384, index_type)) == need


def test_a_training_sample_too_small_for_the_index_type_is_refused_up_front():
    indexes.IndexConfig('IVF1024,Flat', train_size=1024).check(DIM)
    with pytest.raises(ValueError, match="--index_train_size 1000 is below the 1024 vectors a 'IVF1024,Flat' index"):
        indexes.IndexConfig('IVF1024,Flat', train_size=1000).check(DIM)


def test_bad_index_type_and_train_size():
    with pytest.raises(ValueError, match='index_factory'):
        indexes.IndexConfig('Bogus42').check(DIM)
    with pytest.raises(ValueError, match='index_train_size'):
        indexes.IndexConfig(train_size=0)


def test_empty_table_gives_an_empty_index_and_no_bm25(tmp_path):
    write_parts([], tables.CHUNKS_TABLE, str(tmp_path / 'chunks'), 2)
    assert indexes.write_faiss(0, str(tmp_path), DIM, indexes.IndexConfig()) == 0
    assert faiss.read_index(str(tmp_path / 'index' / 'index.faiss')).ntotal == 0
    assert pq.read_table(tmp_path / 'index' / 'ids.parquet').num_rows == 0
    assert indexes.write_bm25(0, str(tmp_path)) == 0 and not (tmp_path / 'bm25').exists()


def test_bm25_from_parts_equals_bm25_of_the_table_texts(output):
    assert indexes.write_bm25(200, str(output)) == 200
    texts = tables.read_table(str(output / 'chunks'), ['text']).column('text').to_pylist()
    expected = bm25_files(texts)
    assert sorted(p.name for p in (output / 'bm25').iterdir()) == sorted(expected)
    for name, data in expected.items():
        assert (output / 'bm25' / name).read_bytes() == data, name


def test_bm25_refuses_parts_of_other_rows_than_written(output):
    with pytest.raises(RuntimeError, match='holds 200 documents, the chunk parts 201 rows'):
        indexes.write_bm25(201, str(output))
