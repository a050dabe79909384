"""Conditional writes on the real stores: create only if absent, replace and delete only the version one read."""

import pytest

from transforms.storage import object_writes


def test_create_replace_and_delete_are_conditional(object_store):
    path = f'{object_store}/lease'
    first = object_writes.create_if_absent(path, b'one')
    assert first and object_writes.create_if_absent(path, b'two') is None
    assert object_writes.read_versioned(path) == (b'one', first)
    second = object_writes.replace_if_version(path, b'three', first)
    assert second and second != first
    assert object_writes.replace_if_version(path, b'four', first) is None  # a stale version is refused
    assert object_writes.read_versioned(path) == (b'three', second)
    assert object_writes.delete_if_version(path, second)
    assert object_writes.read_versioned(path) is None
    assert object_writes.replace_if_version(path, b'five', second) is None  # gone


def test_local_paths_have_no_conditional_writes(tmp_path):
    with pytest.raises(ValueError, match='on s3:// and gs:// only'):
        object_writes.create_if_absent(str(tmp_path / 'x'), b'x')
