"""Digests of a build's files in its manifest, and the check readers make before they read a run."""

import json
import logging

import pytest

from transforms.output import digests


def make_run(root):
    """A run's directory of a few data files and a manifest holding their digests."""
    for path, data in {'chunks/part-00000-of-00001.parquet': b'chunks', 'index/index.faiss': b'x' * 4096,
                       'bm25/vocab.index.json': b'{"pasta": 0}', 'documents/part-00000-of-00001.parquet': b'docs'}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    (root / 'report.html').write_text('not digested: written after the manifest')
    manifest = {'run_id': 'r1', **digests.recorded(str(root))}
    (root / 'manifest.json').write_text(json.dumps(manifest))
    return manifest


def test_digests_list_every_data_file_with_its_size_and_sha256(tmp_path):
    manifest = make_run(tmp_path)
    files = manifest[digests.FILES_KEY]
    assert sorted(files) == ['bm25/vocab.index.json', 'chunks/part-00000-of-00001.parquet',
                             'documents/part-00000-of-00001.parquet', 'index/index.faiss']
    assert files['index/index.faiss']['bytes'] == 4096 and len(files['index/index.faiss']['sha256']) == 64
    digests.check_files(str(tmp_path))
    digests.check_files(str(tmp_path), manifest)


def flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize('damage, says', [
    (lambda root: flip(root / 'index' / 'index.faiss'), 'index/index.faiss does not match the SHA-256 in manifest.json'),
    (lambda root: (root / 'bm25' / 'vocab.index.json').write_text('{"pasta": 1, "x": 2}'),
     'bm25/vocab.index.json is 20 bytes, its build wrote 12'),
    (lambda root: (root / 'bm25' / 'vocab.index.json').unlink(), 'bm25/vocab.index.json is missing'),
    (lambda root: (root / 'bm25' / 'other.npy').write_bytes(b'x'), 'bm25/other.npy was not written by this build'),
])
def test_a_file_the_build_did_not_write_is_refused_in_one_line_naming_it(tmp_path, damage, says):
    make_run(tmp_path)
    damage(tmp_path)
    with pytest.raises(ValueError) as e:
        digests.check_files(str(tmp_path))
    assert f'{tmp_path}/{says}' in str(e.value) and '\n' not in str(e.value) and 'rebuild it' in str(e.value)


def test_a_manifest_without_digests_is_read_unverified_with_a_warning(tmp_path, caplog):
    make_run(tmp_path)
    (tmp_path / 'manifest.json').write_text(json.dumps({'run_id': 'r0'}))
    flip(tmp_path / 'index' / 'index.faiss')
    with caplog.at_level(logging.WARNING):
        digests.check_files(str(tmp_path))
    assert 'holds no digests of its files' in caplog.text
    with pytest.raises(ValueError, match=r'manifest.json is corrupt: its "files" is not'):
        digests.check_files(str(tmp_path), {'files': {'index/index.faiss': 'abc'}})


def test_a_build_records_every_file_it_wrote(sample_root):
    run = sample_root[1] / 'runs' / 'r1'
    manifest = json.loads((run / 'manifest.json').read_text())
    files = manifest[digests.FILES_KEY]
    assert files == digests.file_digests(str(run)) and manifest[digests.FORMAT_KEY] == digests.FORMAT
    assert {'index/index.faiss', 'index/ids.parquet', 'bm25/vocab.index.json', 'bm25/tokenizer.json'} <= set(files)
    assert {p.split('/')[0] for p in files} == set(digests.DIGESTED_DIRS)
    digests.check_files(str(run))


@pytest.mark.parametrize('edit, says', [
    (lambda m: m.pop(digests.FILES_KEY), 'is format 2, whose builds record the digests of their files, but it holds no'),
    (lambda m: m.update({digests.FILES_KEY: None}), 'its "files" is null, which no build writes'),
    (lambda m: m.update({digests.FILES_KEY: None, digests.FORMAT_KEY: None}), 'its "files" is null'),
    (lambda m: m.update({digests.FORMAT_KEY: '2'}), "its \"format\" is '2', not a format number"),
    (lambda m: m.update({digests.FORMAT_KEY: True}), 'not a format number'),
    (lambda m: m.update({digests.FORMAT_KEY: 0}), 'not a format number'),
])
def test_a_manifest_whose_digests_were_edited_away_is_refused(tmp_path, edit, says):
    manifest = make_run(tmp_path)
    edit(manifest)
    (tmp_path / 'manifest.json').write_text(json.dumps(manifest))
    flip(tmp_path / 'index' / 'index.faiss')  # what the edit would hide
    with pytest.raises(ValueError) as refused:
        digests.check_files(str(tmp_path))
    assert says in str(refused.value) and '\n' not in str(refused.value)


@pytest.mark.parametrize('reader', ['query', 'sync', 'publish'])
@pytest.mark.parametrize('files', ['missing', 'null'])
def test_every_reader_refuses_a_built_run_whose_digests_were_edited_away(sample_root, tmp_path, reader, files):
    import shutil

    root = tmp_path / 'root'
    shutil.copytree(sample_root[1], root)
    run = root / 'runs' / 'r1'
    manifest = json.loads((run / 'manifest.json').read_text())
    if files == 'missing':
        del manifest[digests.FILES_KEY]
    else:
        manifest[digests.FILES_KEY] = None
    (run / 'manifest.json').write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match='rebuild the index'):
        if reader == 'query':
            from transforms.query.retriever import check_index_dir

            check_index_dir(str(run))
        elif reader == 'sync':
            from pipelines import sync

            sync.sync(str(root), f'lancedb://{tmp_path}/lance')
        else:
            from pipelines import publish_run

            publish_run.run(['--output', str(root), '--run', 'r1'])
    assert not (tmp_path / 'lance').exists()
