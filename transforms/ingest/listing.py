"""Listing `--input`: every path it names, local or on a Beam filesystem, and what is wrong with one."""

from __future__ import annotations

import os
import posixpath
import re
from typing import Mapping, Optional

from transforms import storage
from transforms.ingest.reasons import BROKEN_LINK, REPEATED_DIRECTORY, SPECIAL_FILE, UNREADABLE
from transforms.storage import buckets
from transforms.types import Rejected

_GLOB_CHARS = re.compile(r'[*?\[]')


def expand_input(pattern: str) -> tuple[str, list[str]]:
    """Resolves `--input` to its root and the sorted files it names.

    An existing path is a path even when it holds glob characters (`dir[1]`).
    A local directory is walked following symbolic links; every path met is
    listed, also those that are no regular file (dangling links, link loops,
    FIFOs, a second link to a directory already walked): `read_file` rejects
    them with a reason, so the listing accounts for everything it saw.

    Args:
      pattern: A file, a directory (read recursively) or a glob, local or on any
        Beam filesystem.

    Returns:
      `(root, paths)`: doc ids of text files are paths relative to `root`.
    """
    if not storage.is_remote(pattern) and os.path.lexists(pattern):
        if os.path.isdir(pattern):
            root = pattern.rstrip('/') or '/'
            return root, list_local_directory(root)
        return posixpath.dirname(pattern), [pattern]
    root, matches = _match_input(pattern)
    return root, sorted(m.path for m in matches)


def check_input(pattern: str, written: Mapping[str, Optional[str]]) -> None:
    """Refuses an `--input` that lists no file, or that overlaps a directory the build writes.

    Checked before anything loads. A build whose output lies inside its input
    would read that output back the next time (and its staging and lock
    files); an input inside the output would be replaced when the build
    publishes.

    Args:
      pattern: `--input`.
      written: `{flag: directory}` of what the build writes (`--output`, `--cache`; None: unset).

    Raises:
      ValueError: One line naming the flags; for a remote input, one naming
        what the store refused first (no bucket in the URL, a missing or
        denied bucket, refused credentials: `buckets.check_bucket`).
    """
    buckets.check_bucket(pattern, '--input')
    root, paths = expand_input(pattern)
    if not paths:
        missing = not storage.is_remote(pattern) and not _GLOB_CHARS.search(pattern) and not os.path.lexists(pattern)
        raise ValueError(f'--input {pattern!r} ' + ('does not exist' if missing else 'matches no file'))
    for flag, directory in written.items():
        if not directory:
            continue
        # A glob under the same root may not reach into `directory`: only the paths listed count.
        if storage.is_within(directory, root) and (
                _is_directory(pattern) or any(storage.is_within(p, directory) for p in paths)):
            raise ValueError(
                f'{flag} {directory!r} is inside --input {pattern!r}: the next build would read this '
                f'one\'s files as input; choose a {flag} outside the input')
        if storage.is_within(root, directory):
            raise ValueError(
                f'--input {pattern!r} is inside {flag} {directory!r}: the build would replace its own input; '
                f'choose a {flag} outside the input')


def input_size(pattern: str) -> tuple[int, int]:
    """`(files, bytes)`: the paths `--input` lists, and the size of its regular files, from their metadata.

    Nothing is read. A remote input's bucket is checked first
    (`buckets.check_bucket`): the launcher lists the input before anything else.
    """
    buckets.check_bucket(pattern, '--input')
    if not storage.is_remote(pattern) and os.path.lexists(pattern):
        paths = expand_input(pattern)[1]
        # Special files and broken links are rejected unread: they add nothing.
        return len(paths), sum(os.stat(p).st_size for p in paths if file_problem(p) is None)
    matches = _match_input(pattern)[1]
    return len(matches), sum(m.size for m in matches)


def _match_input(pattern: str):
    if storage.is_remote(pattern) and not buckets.split_url(pattern)[2]:
        # A whole bucket (`s3://BUCKET`) is a directory, even an empty one: Beam cannot match the bare bucket.
        root = pattern.rstrip('/')
        glob = root + '/**'
    elif _GLOB_CHARS.search(pattern):
        prefix = _GLOB_CHARS.split(pattern, 1)[0]
        root = prefix.rstrip('/') if prefix.endswith('/') else posixpath.dirname(prefix)
        glob = pattern
    elif _is_directory(pattern):
        root = pattern.rstrip('/')
        glob = root + '/**'
    else:
        root = posixpath.dirname(pattern)
        glob = pattern
    return root, storage.match(glob)


def list_local_directory(root: str) -> list[str]:
    """Every non-directory path under a local `root`, sorted, through symbolic links.

    A linked directory is walked once: a link to a directory already walked
    (a loop, or a second name for it) is listed as itself, for `read_file`
    to reject as REPEATED_DIRECTORY.
    """
    paths = []
    walked = {os.path.realpath(root)}
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            paths.append(directory)  # unreadable: read_file says why
            continue
        for entry in entries:
            path = posixpath.join(directory, entry.name)
            if os.path.isdir(path):  # False for dangling links and loops: listed, rejected later
                real = os.path.realpath(path)
                if real in walked:
                    paths.append(path)
                    continue
                walked.add(real)
                pending.append(path)
            else:
                paths.append(path)
    return sorted(paths)


def file_problem(path: str) -> Optional[Rejected]:
    """Why a local path cannot be read as a file, found without opening it.

    A FIFO would block `open` forever and a device could stream without end,
    so the type is checked with `lstat`/`stat` first.
    """
    import errno
    import stat

    try:
        link = os.lstat(path)
    except OSError as e:
        return Rejected(file_source(path), None, UNREADABLE, f'{type(e).__name__}: {e.strerror}')
    try:
        info = os.stat(path)
    except OSError as e:
        if stat.S_ISLNK(link.st_mode):
            what = 'a symbolic link loop' if e.errno == errno.ELOOP else f'a dangling symbolic link to {os.readlink(path)!r}'
            return Rejected(file_source(path), None, BROKEN_LINK, what)
        return Rejected(file_source(path), None, UNREADABLE, f'{type(e).__name__}: {e.strerror}')
    if stat.S_ISDIR(info.st_mode):
        if not os.access(path, os.R_OK | os.X_OK):
            return Rejected(file_source(path), None, UNREADABLE, 'a directory that cannot be listed')
        return Rejected(file_source(path), None, REPEATED_DIRECTORY,
                        f'link to directory {os.path.realpath(path)!r}, which is already read')
    if not stat.S_ISREG(info.st_mode):
        kind = ('FIFO' if stat.S_ISFIFO(info.st_mode) else 'socket' if stat.S_ISSOCK(info.st_mode)
                else 'device' if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else 'special file')
        return Rejected(file_source(path), None, SPECIAL_FILE, f'a {kind}, not a regular file: not opened')
    return None


def _is_directory(path: str) -> bool:
    if not storage.is_remote(path):
        return os.path.isdir(path)
    # Object stores have no directories: a path with objects under it is one.
    return storage.has_files(path)


def path_element(path: str) -> bytes:
    """A listed path as the bytes the pipeline carries, so that a name that is not UTF-8 travels too.

    A local name that is not UTF-8 comes from `os.scandir` with its bad bytes
    as lone surrogates (Python's surrogateescape), which Beam's string coder
    cannot encode: carried as bytes, it reaches `read_file` and is rejected
    there as one file, instead of failing the whole build.
    """
    return path.encode('utf-8', 'surrogateescape')


def element_path(element: bytes) -> str:
    """The path of a `path_element`."""
    return element.decode('utf-8', 'surrogateescape')


# A record's source is `path:N` (line or row N): a file whose own name ends so is shown with that colon escaped.
_RECORD_SUFFIX = re.compile(r':(\d+)$')


def file_source(path: str) -> str:
    """The `source` of a whole file's rejected row: its path, shown so that no other source reads the same.

    A name that is not UTF-8 has its bad bytes escaped (`bad\\xff.txt`), and
    a name ending like a record's position (`c.jsonl:1`, which would read as
    line 1 of `c.jsonl`) has that colon escaped (`c.jsonl\\x3a1`).
    """
    shown = path.encode('utf-8', 'surrogateescape').decode('utf-8', 'backslashreplace')
    return _RECORD_SUFFIX.sub(r'\\x3a\1', shown)


def relative_id(path: str, root: str) -> str:
    """Returns `path` relative to `root`, with `/` separators."""
    if root and path.startswith(root.rstrip('/') + '/'):
        return path[len(root.rstrip('/')) + 1 :]
    return posixpath.basename(path)
