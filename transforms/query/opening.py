"""Opening an index to read it: the run LATEST names, read once more if it was pruned meanwhile; a remote
prefix checked before anything is downloaded."""

from __future__ import annotations

import logging
import posixpath
from typing import Callable, Optional

from transforms import storage
from transforms.output import snapshots, tables
from transforms.storage import buckets

LOG = logging.getLogger('ragsieve.query')
FLAG = '--index'


def open_index(index: str, load: Callable[[str], None]) -> str:
    """Calls `load(directory)` on the index at `index` (a run, or a versioned root's LATEST run); returns it.

    A versioned root is read through its LATEST pointer, once, and `load`
    reads every file of that run: a rebuild publishing or pruning meanwhile
    does not change what it serves. Should the run be pruned while `load`
    reads it (past --prune_grace_seconds), whatever error that gave (the
    store's not-found, Beam's wrapped errors, an OSError, a file that no
    longer matches), LATEST is read once more and its run loaded.

    On an object store the bucket is checked first (`buckets.check_bucket`),
    and a prefix with neither a manifest nor a LATEST is refused after
    reading those two: nothing under it is downloaded.

    Raises:
      ValueError: One line, for a URL without a bucket, a missing or denied
        bucket, refused credentials, a prefix that holds no index, or a
        store's error met by `load` (`buckets.store_problem`); any other
        error of `load` is raised as itself.
    """
    if storage.is_remote(index):
        buckets.check_bucket(index, FLAG)
    for attempt in (1, 2):
        directory: Optional[str] = None
        try:
            directory = snapshots.resolve_index(index)
            if directory == index and storage.is_remote(index):
                _check_manifest(index)
            load(directory)
            return directory
        except Exception as e:
            if attempt == 1 and directory not in (None, index) and _pruned(index, directory):
                LOG.info('run %s was pruned while it was being read: reading %s/LATEST again', directory, index)
                continue
            _raise_reported(e, index)
    raise AssertionError('unreachable')


def _check_manifest(index: str) -> None:
    """Refuses a remote prefix that holds no manifest (LATEST was looked for already): before listing it."""
    if not storage.exists(posixpath.join(index, tables.MANIFEST_FILE)):
        raise ValueError(f'{FLAG} {index!r} is not a ragsieve index: it holds no {tables.MANIFEST_FILE}, and no '
                         f'{snapshots.LATEST_FILE} naming a run')


def _pruned(root: str, directory: str) -> bool:
    """Whether the run `directory` of `root` stopped being LATEST, or lost its manifest, since it was resolved."""
    try:
        run_id = snapshots.read_latest(root)
        return (run_id is None or snapshots.run_dir(root, run_id) != directory
                or not storage.exists(posixpath.join(directory, tables.MANIFEST_FILE)))
    except Exception:  # the store cannot say: the reader's own error is the one to report
        return False


def _raise_reported(error: Exception, index: str) -> None:
    """Raises `error`, a store's error as one line naming the index (a bug, anything else, as itself)."""
    plain_os_error = isinstance(error, OSError) and type(error).__name__ != 'BeamIOError'
    problem = None if plain_os_error else buckets.store_problem(error)  # an OSError of its own names its file
    if problem is None:
        raise error
    raise ValueError(f'{FLAG} {index!r}: {problem}') from error
