"""The one module that knows local paths from object stores (gs://, s3://, any Beam filesystem).

Every path is treated as an object store treats it: a file is an object
named by its whole path; a "directory" is a prefix, never tested for
itself, that exists while objects lie under it; nothing written is empty
(S3's multipart writer cannot write an empty object); what readers must
see at once is published by one object write. Local disk is the special
case, not the model. Every other module reaches a run's files through
here, so an object store's rules are kept in one place.
"""

from __future__ import annotations

import contextlib
import errno
import json
import posixpath
from typing import BinaryIO, Iterable, Iterator, NamedTuple, Optional

from apache_beam.io.filesystems import FileSystems


class WriteError(ValueError):
    """A file that could not be written (a full disk, a missing permission): one line naming it.

    A ValueError, so that the command reports it as it reports bad settings
    (one line, exit 2); it takes one message, so that Beam can re-raise it
    with the step's name appended, as the same type.
    """


class FileInfo(NamedTuple):
    """One file (object) found by a listing: its full path, size in bytes and last change (epoch seconds)."""

    path: str
    size: int
    mtime: float


def configure(options=None) -> None:
    """Hands a command's options to Beam's filesystems: S3's endpoint and keys, GCP's project and credentials.

    Beam does this itself only when a `Pipeline` is built, but a launcher
    lists the input, checks the output and reads LATEST before that: every
    command calls this first. Without options (query, sync, the Retriever),
    the standard environment applies: `AWS_ACCESS_KEY_ID`,
    `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL(_S3)` (read by
    boto3), Google's application default credentials and
    `STORAGE_EMULATOR_HOST` (read by google-cloud-storage).

    Args:
      options: A `PipelineOptions`, or None for the environment's settings.
    """
    if options is None:
        from apache_beam.options.pipeline_options import PipelineOptions

        options = PipelineOptions([])
    _emulator_without_credentials()
    from transforms.storage import retries, s3_clients

    retries.configure(options.get_all_options().get('store_retry_seconds'))
    s3_clients.share()
    FileSystems.set_options(options)


def _emulator_without_credentials() -> None:
    """With `STORAGE_EMULATOR_HOST`, GCS is reached with no credentials, as google-cloud-storage itself does.

    Beam looks for application default credentials first, retrying for
    ~30 s where there are none, as on a machine that runs an emulator; its
    cached answer is set to "none" (anonymous) instead.
    """
    import os

    if not os.environ.get('STORAGE_EMULATOR_HOST'):
        return
    try:
        from apache_beam.internal.gcp import auth
    except ImportError:  # no GCP extra: nothing reaches GCS
        return
    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials, auth._Credentials._credentials_init = None, True


def _filesystems():
    """FileSystems, configured from the environment when no command did (a library user's Retriever).

    A worker's harness configures Beam with the job's options: those are kept.
    """
    if getattr(FileSystems, '_pipeline_options', None) is None:
        configure()
    return FileSystems


def pipeline_options():
    """The options Beam's filesystems were configured with (see `configure`)."""
    return _filesystems()._pipeline_options


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
        with _filesystems().create(path) as f:
            yield f


def is_remote(path: str) -> bool:
    """Whether `path` is on a Beam filesystem other than the local one (`gs://...`, `s3://...`)."""
    return '://' in path


def scheme(path: str) -> str:
    """`'s3'`, `'gs'`, ... of a remote path; `'file'` for a local one."""
    return path.split('://', 1)[0] if is_remote(path) else 'file'


def is_within(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or lies under it (local paths compared after resolving links)."""
    if is_remote(path) or is_remote(directory):
        path, directory = path.rstrip('/'), directory.rstrip('/')
    else:
        import os

        path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip('/') + '/')


def parent(path: str) -> str:
    """The prefix `path` lies under (`s3://b/x/out` -> `s3://b/x`)."""
    return posixpath.dirname(path.rstrip('/'))


# --- reading and listing -------------------------------------------------------------------------------------


def exists(path: str) -> bool:
    """Whether a file (an object) is at `path`; a directory is not a file (see `has_files`)."""
    if not is_remote(path):
        import os

        return os.path.isfile(path)
    return _filesystems().exists(path)


def match(pattern: str, limit: Optional[int] = None) -> list[FileInfo]:
    """The files a glob matches (`*` within a name, `**` across prefixes), sorted by path."""
    found = _filesystems().match([pattern], limits=[limit] if limit else None)[0].metadata_list
    return sorted(FileInfo(m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in found)


def list_files(prefix: str) -> list[FileInfo]:
    """Every file under the directory `prefix`, at any depth, sorted by path (nothing for a missing one)."""
    if not is_remote(prefix):
        import os

        if not os.path.isdir(prefix):
            return []
    return match(prefix.rstrip('/') + '/**')


def has_files(prefix: str) -> bool:
    """Whether any file lies under the directory `prefix`: what "the directory exists" means on an object store."""
    if not is_remote(prefix):
        import os

        if not os.path.isdir(prefix):
            return False
    return bool(match(prefix.rstrip('/') + '/**', limit=1))


@contextlib.contextmanager
def open_read(path: str) -> Iterator[BinaryIO]:
    """A file opened for reading on any Beam filesystem (FileNotFoundError / OSError when it cannot be)."""
    with _filesystems().open(path) as f:
        yield f


def read_bytes(path: str, limit: Optional[int] = None) -> bytes:
    """The whole file, or its first `limit` bytes."""
    with open_read(path) as f:
        return f.read() if limit is None else f.read(limit)


# --- writing and deleting ------------------------------------------------------------------------------------


def write_bytes(path: str, data: bytes) -> None:
    """Writes a whole file to any Beam filesystem (one object write).

    Raises:
      WriteError: Naming the file, when it cannot be written.
      ValueError: For empty data: S3's writer cannot write an empty
        object, so nothing writes one, here or anywhere (a marker holds
        what it marks).
    """
    if not data:
        raise ValueError(f'refusing to write the empty file {path}: object stores cannot hold one reliably')
    with create(path) as f:
        f.write(data)


def write_json(path: str, value) -> None:
    """Writes indented, key-sorted JSON to any Beam filesystem, atomically (see `write_atomic`)."""
    write_atomic(path, (json.dumps(value, indent=2, sort_keys=True) + '\n').encode('utf-8'))


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


def delete_files(paths: Iterable[str]) -> None:
    """Deletes files (objects); a path already gone is no error."""
    paths = list(paths)
    if not paths:
        return
    if not is_remote(paths[0]):
        import os

        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        return
    _filesystems().delete(paths)


def delete_trees(paths: Iterable[str]) -> None:
    """Deletes directories with everything under them (remotely: every object under each prefix)."""
    paths = list(paths)
    if not paths:
        return
    if not is_remote(paths[0]):
        import shutil

        for path in paths:
            with contextlib.suppress(FileNotFoundError):  # already gone; any other failure is one to see
                shutil.rmtree(path.rstrip('/'))
        return
    # By listing, not by Beam's recursive delete of `dir/`: one rule (list the prefix) on every store.
    delete_files([f.path for p in paths for f in list_files(p)])


def move_files(sources: list[str], targets: list[str]) -> None:
    """Moves files to new paths (remotely: copy, then delete), in order."""
    if sources:
        _filesystems().rename(sources, targets)


@contextlib.contextmanager
def local_copy(directory: str) -> Iterator[str]:
    """`directory` as a local path, for libraries that open files by name (FAISS, bm25s).

    A local directory is itself; a remote one is downloaded, every file under
    its prefix, into a temporary directory deleted after the block.

    Raises:
      ValueError: For a remote prefix with no file under it.
    """
    if not is_remote(directory):
        yield directory
        return
    import os
    import shutil
    import tempfile

    found = list_files(directory)
    if not found:
        raise ValueError(f'{directory} holds no files')
    local = tempfile.mkdtemp(prefix='ragsieve-')
    try:
        for f in found:
            parts = f.path[len(directory.rstrip('/')) + 1 :].split('/')
            if any(p in ('', '.', '..') for p in parts):  # a name that would land outside the copy
                raise ValueError(f'{f.path} is no name a build writes: refusing to read {directory}')
            target = os.path.join(local, *parts)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open_read(f.path) as source, open(target, 'wb') as out:
                shutil.copyfileobj(source, out, 1 << 20)
        yield local
    finally:
        shutil.rmtree(local, ignore_errors=True)
