"""The one module that knows local paths from Beam filesystems (gs://, s3://, ...)."""

from __future__ import annotations

import contextlib
import errno
import json
from typing import BinaryIO, Iterable, Iterator

from apache_beam.io.filesystems import FileSystems


class WriteError(ValueError):
    """A file that could not be written (a full disk, a missing permission): one line naming it.

    A ValueError, so that the command reports it as it reports bad settings
    (one line, exit 2); it takes one message, so that Beam can re-raise it
    with the step's name appended, as the same type.
    """


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """Turns an OSError raised while writing `path` into a WriteError naming it.

    A full disk is an OSError of write() or close() that names no file: only
    the code that writes knows which one it was.
    """
    try:
        yield
    except OSError as e:
        code = f' ({errno.errorcode[e.errno]})' if e.errno in errno.errorcode else ''
        raise WriteError(f'cannot write {path}: {e.strerror or e}{code}') from e


@contextlib.contextmanager
def create(path: str) -> Iterator[BinaryIO]:
    """A file being written on any Beam filesystem; a failure to write it is a WriteError naming it."""
    with writing(path):
        with FileSystems.create(path) as f:
            yield f


def is_remote(path: str) -> bool:
    """Whether `path` is on a Beam filesystem other than the local one (`gs://...`, `s3://...`)."""
    return '://' in path


def is_within(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or lies under it (local paths compared after resolving links)."""
    if is_remote(path) or is_remote(directory):
        path, directory = path.rstrip('/'), directory.rstrip('/')
    else:
        import os

        path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip('/') + '/')


def write_bytes(path: str, data: bytes) -> None:
    """Writes a whole file to any Beam filesystem.

    Raises:
      WriteError: Naming the file, when it cannot be written.
    """
    with create(path) as f:
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

    Raises:
      WriteError: Naming the file, when it cannot be written; `path` is then
        as it was, and no temporary is left.
    """
    if is_remote(path):
        write_bytes(path, data)
        return
    import os

    temporary = f'{path}.tmp-{os.getpid()}'
    with writing(path):
        try:
            os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
            with open(temporary, 'wb') as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            raise
