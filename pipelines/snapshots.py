"""Versioned output roots: one directory per run, an atomic LATEST pointer, retention, cleanup.

    ROOT/runs/<run_id>/   one build's outputs; complete once manifest.json exists
    ROOT/LATEST           the run_id readers use, replaced atomically after a run succeeded
    ROOT/cache/           the feature cache (see `transforms.feature_cache`)

A run writes only into its own directory and writes manifest.json last, so a
run killed at any point leaves a directory without a manifest, which nobody
reads and the next run deletes; LATEST and the run it names are never touched
before the new run is complete.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import posixpath
import re
from typing import Iterator, Optional

from apache_beam.io.filesystems import FileSystems

from transforms.write import MANIFEST_FILE, delete_trees, split_complete, write_atomic

RUNS_DIR = 'runs'
LATEST_FILE = 'LATEST'
CACHE_DIR = 'cache'
LOCK_FILE = '.lock'

_RUN_ID = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]*')


def new_run_id(now: Optional[datetime.datetime] = None) -> str:
    """A run id that sorts by start time: UTC `YYYYMMDDTHHMMSS` and microseconds."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime('%Y%m%dT%H%M%S%fZ')


def check_run_id(run_id: str) -> str:
    """Returns `run_id` if it can name a directory.

    Raises:
      ValueError: If it is empty, starts with `.`/`-` or holds other than
        letters, digits, `.`, `_` and `-`.
    """
    if not _RUN_ID.fullmatch(run_id or ''):
        raise ValueError(
            f'--run_id {run_id!r} must be letters, digits, ".", "_" or "-", starting with a '
            'letter or digit')
    return run_id


def run_dir(root: str, run_id: str) -> str:
    return posixpath.join(root, RUNS_DIR, run_id)


def read_latest(root: str) -> Optional[str]:
    """The run_id LATEST names, or None when nothing was published yet."""
    path = posixpath.join(root, LATEST_FILE)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as f:
        run_id = f.read().decode('utf-8').strip()
    return check_run_id(run_id)


def write_latest(root: str, run_id: str) -> None:
    """Points LATEST at `run_id` in one atomic replace."""
    write_atomic(posixpath.join(root, LATEST_FILE), f'{check_run_id(run_id)}\n'.encode('utf-8'))


def resolve_index(path: str) -> str:
    """The directory of the index at `path`: the run LATEST names, or `path` itself.

    Raises:
      ValueError: If LATEST names a run that is missing or incomplete.
    """
    run_id = read_latest(path)
    if run_id is None:
        return path
    directory = run_dir(path, run_id)
    if not FileSystems.exists(posixpath.join(directory, MANIFEST_FILE)):
        raise ValueError(f'{path}/{LATEST_FILE} names run {run_id!r}, but {directory} is not a complete run')
    return directory


def list_runs(root: str) -> tuple[list[str], list[str]]:
    """The `(complete, incomplete)` run ids under `root`.

    A run is complete once its manifest.json exists: the build writes it
    last. Complete runs come oldest first by that file's time, so run ids
    need not sort; incomplete ones by name.
    """
    runs = posixpath.join(root, RUNS_DIR)
    files = []
    for m in FileSystems.match([posixpath.join(runs, '**')])[0].metadata_list:
        run_id, _, rest = m.path[len(runs) :].lstrip('/').partition('/')
        files.append((run_id, rest, m.last_updated_in_seconds))
    return split_complete(files, MANIFEST_FILE)


def clean_debris(root: str) -> list[str]:
    """Deletes what killed runs left: incomplete run directories and pointer temporaries.

    Only safe while no other build writes to `root` (see `lock`).

    Returns:
      The deleted paths.
    """
    _, incomplete = list_runs(root)
    debris = [run_dir(root, r) for r in incomplete]
    delete_trees(debris)
    temporaries = [
        m.path for m in FileSystems.match([posixpath.join(root, f'{LATEST_FILE}.tmp-*')])[0].metadata_list]
    if temporaries:
        FileSystems.delete(temporaries)
    return debris + temporaries


def prune_runs(root: str, keep: int) -> list[str]:
    """Deletes complete runs beyond the newest `keep`, never the one LATEST names.

    Returns:
      The deleted run ids.
    """
    if keep < 1:
        raise ValueError(f'keep_runs must be >= 1, got {keep}')
    complete, _ = list_runs(root)
    latest = read_latest(root)
    old = [r for r in complete[:-keep] if r != latest]
    delete_trees([run_dir(root, r) for r in old])
    return old


@contextlib.contextmanager
def lock(root: str) -> Iterator[None]:
    """Holds an exclusive lock on a local root for the length of a build.

    Cleanup deletes what no complete run owns, which would break a second
    build writing to the same root at the same time. The lock is a `flock`,
    released by the kernel even when the holder is killed. Object stores have
    no such lock: schedule one build per root there.

    Raises:
      ValueError: If another process holds the lock.
    """
    if '://' in root:
        yield
        return
    import fcntl

    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, LOCK_FILE), 'a') as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f'another ragsieve build is writing to {root} (it holds {LOCK_FILE})') from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
