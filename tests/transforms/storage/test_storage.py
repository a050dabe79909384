"""Writing files: a write that fails is one error naming the file, and an atomic write leaves nothing half done."""

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
