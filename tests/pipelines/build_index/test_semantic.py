"""The semantic chunkers inside the build pipeline (DirectRunner, real model)."""

import faiss
import pyarrow.parquet as pq
import pytest

from pipelines.build_index import job as build_index


@pytest.mark.parametrize('chunker,limit', [('cluster_semantic', 64), ('semantic_breakpoint', 254)])
def test_semantic_chunkers_keep_the_output_contract(corpus_dir, tmp_path, chunker, limit):
    root, expected = corpus_dir
    out = tmp_path / 'out'
    build_index.run(['--input', str(root), '--output', str(out), '--chunker', chunker,
                     '--chunk_size', '64', '--filter', 'none'])
    chunks = pq.read_table(out / 'chunks').to_pylist()
    assert {c['doc_id'] for c in chunks} == expected['documents']
    pasta = (root / 'pasta.txt').read_text()
    pasta_chunks = [c for c in chunks if c['doc_id'] == 'pasta.txt']
    assert len(pasta_chunks) > 2
    for c in pasta_chunks:
        assert pasta[c['char_start']:c['char_end']] == c['text'] and c['text'] == c['text'].strip()
    assert all(0 < c['n_tokens'] <= limit for c in chunks)
    assert faiss.read_index(str(out / 'index' / 'index.faiss')).ntotal == len(chunks)


def test_semantic_chunkers_refuse_overlap(corpus_dir, tmp_path):
    root, _ = corpus_dir
    with pytest.raises(ValueError, match='chunk_overlap must be 0'):
        build_index.run(['--input', str(root), '--output', str(tmp_path / 'out'),
                         '--chunker', 'cluster_semantic', '--chunk_overlap', '10'])
