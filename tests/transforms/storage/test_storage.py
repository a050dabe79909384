"""Writing files: a write that fails is one error naming the file, and an atomic write leaves nothing half done."""

import os

import pytest

from tests.helpers import fill_disk
from transforms import storage


def test_a_write_the_disk_refuses_names_the_file(tmp_path):
    # /dev/full: the kernel answers every write with ENOSPC, as a full disk does.
    with pytest.raises(storage.WriteError, match=r'^cannot write /dev/full: No space left on device \(ENOSPC\)$'):
        storage.write_bytes('/dev/full', b'x' * 100)


def test_a_streamed_write_the_disk_refuses_names_the_file():
    with pytest.raises(storage.WriteError, match='cannot write /dev/full: No space left on device'):
        with storage.create('/dev/full') as f:
            f.write(b'x' * (1 << 20))


def test_an_atomic_write_on_a_full_disk_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / 'manifest.json'
    storage.write_json(str(target), {'old': True})
    fill_disk(monkeypatch, 'manifest.json')
    with pytest.raises(storage.WriteError, match=f'cannot write {target}: No space left on device'):
        storage.write_json(str(target), {'new': True})
    assert target.read_text() == '{\n  "old": true\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['manifest.json']


def test_a_write_error_is_a_value_error_beam_can_rebuild():
    # Beam re-raises a step's error as type(e)(message + step): one string must do.
    error = storage.WriteError('cannot write x: No space left on device')
    assert isinstance(error, ValueError) and str(type(error)(error.args[0] + ' [step]')).endswith('[step]')


# --- on object stores (real MinIO and fake-gcs-server) -------------------------------------------------------


def test_a_directory_is_a_prefix_with_files_under_it(object_store):
    storage.write_bytes(f'{object_store}/d/a.txt', b'a')
    storage.write_bytes(f'{object_store}/d/sub/b.txt', b'bb')
    assert storage.exists(f'{object_store}/d/a.txt') and not storage.exists(f'{object_store}/d')
    assert storage.has_files(f'{object_store}/d') and not storage.has_files(f'{object_store}/nothing')
    assert [(f.path[len(object_store):], f.size) for f in storage.list_files(f'{object_store}/d')] == [
        ('/d/a.txt', 1), ('/d/sub/b.txt', 2)]
    assert [f.path for f in storage.match(f'{object_store}/d/*.txt')] == [f'{object_store}/d/a.txt']
    storage.delete_trees([f'{object_store}/d'])
    assert storage.list_files(object_store) == []


def test_nothing_writes_an_empty_object(object_store, tmp_path):
    for path in (f'{object_store}/empty', str(tmp_path / 'empty')):
        with pytest.raises(ValueError, match='refusing to write the empty file'):
            storage.write_bytes(path, b'')
    assert storage.list_files(object_store) == []


def test_a_remote_directory_is_read_through_a_local_copy_deleted_after(object_store):
    storage.write_bytes(f'{object_store}/run/index/ids.parquet', b'ids')
    with storage.local_copy(f'{object_store}/run') as local:
        assert open(f'{local}/index/ids.parquet', 'rb').read() == b'ids'
    assert not os.path.exists(local)
    with pytest.raises(ValueError, match='holds no files'):
        with storage.local_copy(f'{object_store}/missing'):
            pass
