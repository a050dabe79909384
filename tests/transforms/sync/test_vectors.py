"""The vectors a sync writes: from the run's Flat FAISS index by position, bit for bit those of chunks/."""

import shutil

import numpy as np

from tests.helpers import resharded
from transforms.output import tables
from transforms.sync import rows
from transforms.sync.run_check import checked_run
from transforms.sync.vectors import RunVectors


def test_the_flat_index_gives_the_vectors_of_chunks(synced_runs, tmp_path):
    _, r1, _ = synced_runs
    run = checked_run(str(resharded(r1, tmp_path / 'r1', 3)))
    assert len(run.part_rows) == 3
    vectors = RunVectors(run)
    assert vectors.from_index  # the build's default, Flat
    for number, path in enumerate(run.part_paths()):
        positions = list(range(0, run.part_rows[number], 2))
        expected = rows.vector_matrix(tables.read_part(path, ['embedding']).column('embedding'))[positions]
        found = rows.vector_matrix(vectors.read(number, path, positions))
        assert found.tobytes() == np.ascontiguousarray(expected, np.float32).tobytes(), path


def test_without_a_flat_index_chunks_has_the_vectors(synced_runs, tmp_path):
    import faiss

    _, r1, _ = synced_runs
    shutil.copytree(r1, tmp_path / 'r1')
    index = tmp_path / 'r1' / 'index' / 'index.faiss'
    hnsw = faiss.IndexHNSWFlat(384, 8, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(rows.vector_matrix(tables.read_table(str(r1 / 'chunks'), ['embedding']).column('embedding')))
    faiss.write_index(hnsw, str(index))
    run = checked_run(str(tmp_path / 'r1'))
    assert not RunVectors(run).from_index
    index.write_bytes(b'not an index')
    vectors = RunVectors(run)
    path = run.part_paths()[0]
    assert not vectors.from_index
    assert np.array_equal(rows.vector_matrix(vectors.read(0, path, [0])),
                          rows.vector_matrix(tables.read_part(path, ['embedding']).column('embedding'))[[0]])
