"""End-to-end build runs on the DirectRunner: the whole output contract."""

import json
import subprocess
import sys

import faiss
import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.build_index import job as build_index
from tests.helpers import PORTABLE_PROBE, REPO, portable_mkl_cbwr
from transforms.features.kernels import default_mode
from transforms.features.embedding import kernel_probe
from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model
from transforms.features.precision import fastest_fp32_backend, set_precision
from transforms.output import tables
from transforms.text import content_hash


def build(corpus, out, *flags):
    return build_index.run(['--input', str(corpus), '--output', str(out), '--chunk_size', '64', *flags])


# Several parts per table, so sharding is part of every check below.
SHARDS = ('--num_shards', '3')


@pytest.fixture
def built(corpus_dir, tmp_path):
    root, expected = corpus_dir
    out = tmp_path / 'out'
    manifest = build(root, out, '--chunk_overlap', '16', *SHARDS)
    return root, expected, out, manifest


def data_files(directory):
    return {str(p.relative_to(directory)): p.read_bytes()
            for name in ['chunks', 'dropped', 'rejected', 'documents', 'index', 'bm25']
            for p in sorted((directory / name).rglob('*')) if p.is_file()}


def test_output_contract(built, embedding_model):
    root, expected, out, manifest = built
    for table in ['chunks', 'dropped', 'rejected', 'documents']:
        assert sorted(p.name for p in (out / table).iterdir()) == [
            f'part-0000{i}-of-00003.parquet' for i in range(3)], table
    chunks = tables.read_table(str(out / 'chunks')).to_pylist()
    # pyarrow reads the directory as a dataset in the same (shard) order.
    assert pq.read_table(out / 'chunks').column('chunk_id').to_pylist() == [c['chunk_id'] for c in chunks]
    assert {c['doc_id'] for c in chunks} == expected['documents']
    texts = {'pasta.txt': (root / 'pasta.txt').read_text(), 'sub/orbits.md': (root / 'sub/orbits.md').read_text()}
    for c in chunks:
        assert c['chunk_id'] == f"{c['doc_id']}#{c['chunk_index']}"
        if c['doc_id'] in texts:
            assert texts[c['doc_id']][c['char_start'] : c['char_end']] == c['text']
        assert 0 < c['n_tokens'] <= 64
        assert c['content_hash'] == content_hash(c['text'])
        assert len(c['embedding']) == 384
    # Each document's chunks are in one part, each part sorted by (doc_id, chunk_index).
    for part in sorted((out / 'chunks').iterdir()):
        keys = [(c['doc_id'], c['chunk_index']) for c in pq.read_table(part).to_pylist()]
        assert keys == sorted(keys)
        assert {tables.shard_of(doc, 3) for doc, _ in keys} <= {int(part.name[5:10])}
    # The default cascade drops the repeated pasta paragraphs; kept + dropped is every chunk.
    dropped = pq.read_table(out / 'dropped').to_pylist()
    assert sum(c['doc_id'] == 'pasta.txt' for c in chunks + dropped) > 3
    assert len(chunks) + len(dropped) == manifest['counts']['chunks_before_filters']
    assert json.loads(next(c['metadata'] for c in chunks if c['doc_id'] == 'j1')) == {'lang': 'en'}

    rejected = pq.read_table(out / 'rejected').to_pylist()
    assert {r['source'][len(str(root)) + 1 :]: r['reason'] for r in rejected} == expected['rejected']
    assert all(r['detail'] for r in rejected)

    index = faiss.read_index(str(out / 'index' / 'index.faiss'))
    ids = pq.read_table(out / 'index' / 'ids.parquet').column('chunk_id').to_pylist()
    assert index.ntotal == len(chunks) == len(ids)
    assert ids == [c['chunk_id'] for c in chunks]
    j1 = next(i for i, c in enumerate(chunks) if c['doc_id'] == 'j1')
    query = np.array([chunks[j1]['embedding']], dtype=np.float32)
    scores, positions = index.search(query, 1)
    assert positions[0][0] == j1 and scores[0][0] == pytest.approx(1.0, abs=1e-5)

    on_disk = json.loads((out / 'manifest.json').read_text())
    assert on_disk == manifest
    # The audit of the dropped duplicates (the repeated pasta paragraphs) reached the manifest, and only it.
    audit = manifest['lossless']
    assert audit['chunks_checked'] == sum(d['duplicate_of'] is not None for d in dropped) > 0
    assert audit['sentences_checked'] > 0 and audit['sentences_lost'] == 0 and audit['examples'] == []
    assert not (out / 'lossless.json').exists()
    counts = manifest['counts']
    assert counts['chunks'] == len(chunks)
    assert counts['rejected'] == len(expected['rejected'])
    # Accounting: every record read became a document or a rejected row.
    assert counts['documents_indexed'] == len(expected['documents'])
    assert counts['documents_read'] == len(expected['documents']) + 1  # + the duplicate id
    assert manifest['config']['chunker'] == {'name': 'recursive', 'chunk_size': 64, 'chunk_overlap': 16, 'params': []}
    assert manifest['versions']['apache-beam'] and manifest['model']['dim'] == 384
    # What the vectors' bits depend on, to compare two runs by: the kernel family (its probe digest).
    kernels = manifest['kernels']
    # Without --embed_kernels, the faster kernels of this CPU's family (kernels.FASTEST).
    assert kernels['mode'] == kernels['default_on_this_cpu'] == default_mode()
    assert kernels['byte_stable_across_machines'] == (kernels['mode'] == 'portable')
    assert kernels['mkl_cbwr'].endswith(',STRICT') and kernels['torch'].startswith('2.13.0')
    # Without an embedding flag, fp32 on this CPU family's faster backend (precision.FASTEST_FP32).
    backend = manifest['embedding']['backend']
    assert (manifest['embedding']['precision'], backend) == ('fp32', fastest_fp32_backend(default_mode()))
    model = embedding_model if backend == 'torch' else set_precision(
        load_embedding_model(DEFAULT_EMBEDDING_MODEL), 'fp32', backend)
    assert kernels['probe'] == kernel_probe(model)
    assert not list(out.parent.glob('out.staging-*'))


def test_portable_kernels_give_the_recorded_portable_bits(corpus_dir, tmp_path):
    # Kernels are pinned at a process's start: this test process runs this CPU's default ones.
    root, _ = corpus_dir
    out = tmp_path / 'portable'
    subprocess.run([sys.executable, '-m', 'pipelines.build_index', '--input', str(root), '--output', str(out),
                    '--chunk_size', '64', '--filter', 'none', '--embed_kernels', 'portable'],
                   cwd=REPO, check=True, capture_output=True, timeout=600)
    kernels = json.loads((out / 'manifest.json').read_text())['kernels']
    assert kernels['mode'] == 'portable' and kernels['byte_stable_across_machines']
    assert kernels['mkl_cbwr'] == portable_mkl_cbwr() and kernels['aten_cpu_capability'] == 'AVX2'
    assert kernels['probe'] == PORTABLE_PROBE


def test_same_input_gives_identical_bytes_across_runner_modes(built, tmp_path):
    root, _, first, _ = built
    second = tmp_path / 'second'
    build(root, second, '--chunk_overlap', '16', *SHARDS,
          '--direct_running_mode=multi_processing', '--direct_num_workers=2')
    files = data_files(first)
    assert 'bm25/vocab.index.json' in files and 'chunks/part-00002-of-00003.parquet' in files
    assert data_files(second) == files


def test_config_file_with_flag_override(corpus_dir, tmp_path):
    root, _ = corpus_dir
    config = tmp_path / 'build.yaml'
    config.write_text(f'input: {root}\noutput: {tmp_path / "ignored"}\nchunker: fixed\nchunk_size: 300\n')
    out = tmp_path / 'out'
    manifest = build_index.run(['--config', str(config), '--output', str(out), '--chunk_size', '32'])
    assert manifest['config']['chunker'] == {'name': 'fixed', 'chunk_size': 32, 'chunk_overlap': 0, 'params': []}
    assert (out / 'manifest.json').exists() and not (tmp_path / 'ignored').exists()


def test_rebuild_replaces_previous_index(built, tmp_path):
    root, _, out, _ = built
    (out / 'stale.txt').write_text('from an older run')
    build(root, out)
    assert not (out / 'stale.txt').exists() and (out / 'manifest.json').exists()


def test_refuses_to_replace_a_foreign_directory(corpus_dir, tmp_path):
    root, _ = corpus_dir
    precious = tmp_path / 'precious'
    precious.mkdir()
    (precious / 'thesis.tex').write_text('years of work')
    with pytest.raises(ValueError, match='refusing to replace'):
        build(root, precious)
    assert (precious / 'thesis.tex').exists()


@pytest.mark.parametrize('flags,message', [
    (['--chunk_overlap', '64'], 'chunk_overlap'),
    (['--filter', 'bogus'], 'unknown filter'),
    (['--filter', 'minhash@1.5'], 'minhash threshold'),
    (['--intra_doc_min_salience', '2'], 'intra_doc_min_salience'),
    (['--embedding_model', '/no/such/model'], 'cannot load embedding model'),
    (['--index_type', 'NoSuchIndex'], 'index_factory'),
    (['--num_shards', '-1'], 'num_shards'),
    (['--index_train_size', '0'], 'index_train_size'),
])
def test_bad_settings_fail_before_running(corpus_dir, tmp_path, flags, message):
    root, _ = corpus_dir
    with pytest.raises(ValueError, match=message):
        build(root, tmp_path / 'out', *flags)
    assert not (tmp_path / 'out').exists()


def test_the_job_keeps_its_python_api_as_a_package():
    # `from pipelines import build_index; build_index.run(...)`, as before the job became a package.
    import pipelines.build_index as package
    from pipelines.build_index import pipeline

    assert package.run is build_index.run and package.build_pipeline is pipeline.build_pipeline
    with pytest.raises(AttributeError, match='no attribute'):
        package.no_such_thing
