"""The one module that knows local paths from Beam filesystems (gs://, s3://, ...)."""

from __future__ import annotations

import json
from typing import Iterable

from apache_beam.io.filesystems import FileSystems


def is_remote(path: str) -> bool:
    """Whether `path` is on a Beam filesystem other than the local one (`gs://...`, `s3://...`)."""
    return '://' in path


def write_bytes(path: str, data: bytes) -> None:
    """Writes a whole file to any Beam filesystem."""
    with FileSystems.create(path) as f:
        f.write(data)


def write_json(path: str, value) -> None:
    """Writes indented, key-sorted JSON to any Beam filesystem, atomically (see `write_atomic`)."""
    write_atomic(path, (json.dumps(value, indent=2, sort_keys=True) + '\n').encode('utf-8'))


def delete_trees(paths: Iterable[str]) -> None:
    """Deletes directories with everything under them, on any Beam filesystem."""
    paths = list(paths)
    if not paths:
        return
    # Object stores delete a "directory" as the prefix `dir/`; the local filesystem wants `dir`.
    FileSystems.delete([p.rstrip('/') + '/' if is_remote(p) else p.rstrip('/') for p in paths])


def write_atomic(path: str, data: bytes) -> None:
    """Writes a whole file so that readers see the old content or the new, never a part.

    Locally a temporary sibling is renamed over `path`; object stores
    (gs://, s3://) publish an object only when its upload completes.
    """
    if is_remote(path):
        write_bytes(path, data)
        return
    import os

    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    temporary = f'{path}.tmp-{os.getpid()}'
    with open(temporary, 'wb') as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
