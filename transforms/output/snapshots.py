"""Versioned output roots: one directory per run, an atomic LATEST pointer, retention, cleanup.

    ROOT/runs/<run_id>/   one build's outputs; complete once manifest.json exists
    ROOT/LATEST           the run_id readers use, replaced atomically after a run succeeded
    ROOT/cache/           the feature cache (see `features.cache`)

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
import time
from typing import Callable, Iterator, Optional, Sequence, Union

from transforms import file_locks, storage
from transforms.output.publish import split_complete
from transforms.output.tables import MANIFEST_FILE
from transforms.storage import delete_trees, leases, object_writes, write_atomic

RUNS_DIR = 'runs'
LATEST_FILE = 'LATEST'
CACHE_DIR = 'cache'
LOCK_FILE = '.lock'
# What a versioned root may hold besides debris of its own (LATEST.tmp-*).
ROOT_ENTRIES = (RUNS_DIR, LATEST_FILE, CACHE_DIR, LOCK_FILE)
# A run replaced as LATEST less than this long ago is not pruned: a query
# that read LATEST just before may still be opening its files.
DEFAULT_PRUNE_GRACE_SECONDS = 600.0

# What `lock_file` yields: a lease on an object store, a held lock file locally.
Lock = Union[None, leases.Lease, file_locks.HeldFile]

_RUN_ID = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]*')


def new_run_id(now: Optional[datetime.datetime] = None) -> str:
    """A run id that sorts by start time: UTC `YYYYMMDDTHHMMSS` and microseconds."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime('%Y%m%dT%H%M%S%fZ')


def check_run_id(run_id: str, flag: Optional[str] = '--run_id') -> str:
    """Returns `run_id` if it can name a directory.

    Args:
      run_id: The run id.
      flag: The flag it came from, for the message (`ragsieve publish` takes `--run`); None for one read
        from a file, which no flag gave.

    Raises:
      ValueError: If it is empty, starts with `.`/`-` or holds other than
        letters, digits, `.`, `_` and `-`.
    """
    if not _RUN_ID.fullmatch(run_id or ''):
        raise ValueError(
            f'{flag or "a run id"} {run_id[:80]!r} must be letters, digits, ".", "_" or "-", starting with a '
            'letter or digit')
    return run_id


def run_dir(root: str, run_id: str) -> str:
    return posixpath.join(root, RUNS_DIR, run_id)


class Superseded(ValueError):
    """LATEST changed since this writer read it: another build or publish got there first (exit 2)."""


def read_latest(root: str) -> Optional[str]:
    """The run_id LATEST names, or None when nothing was published yet.

    Raises:
      ValueError: If LATEST cannot be read or names no valid run id.
    """
    path = posixpath.join(root, LATEST_FILE)
    if not storage.exists(path):
        return None
    try:
        data = storage.read_bytes(path, 1024)
    except OSError as e:
        raise ValueError(f'{path} cannot be read ({e})') from None
    return _run_id_of(path, data)


def _run_id_of(path: str, data: bytes) -> str:
    try:
        return check_run_id(data.decode('utf-8').strip(), flag=None)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f'{path} is corrupt: it must hold one run id ({e})') from None


def latest_version(root: str) -> Optional[str]:
    """The version of LATEST that `publish_latest` will replace: its ETag or generation, None when there is none.

    Locally always None: there the root's `flock` is the fence (the kernel
    holds it through any pause of its holder).
    """
    if not storage.is_remote(root):
        return None
    found = object_writes.read_versioned(posixpath.join(root, LATEST_FILE))
    return found and found[1]


def publish_latest(root: str, run_id: str, read_version: Optional[str], held: Sequence[Lock] = ()) -> None:
    """The commit point of a versioned root: points LATEST at `run_id`, fenced.

    Fenced twice: the locks `held` are renewed conditionally first
    (`fence_locks`), then LATEST is written on an object store only if it
    is still the version this writer read when it took the root
    (`read_version`; None: only if there is no LATEST). A writer paused past
    its lease while another build published finds LATEST changed and
    publishes nothing, whatever its clock says; one whose write landed but
    whose answer was lost finds its own run id there.

    Raises:
      leases.Lost: If a lease was lost.
      Superseded: If LATEST changed since `read_version`.
    """
    fence_locks(held)
    path = posixpath.join(root, LATEST_FILE)
    data = f'{check_run_id(run_id)}\n'.encode('utf-8')
    if not storage.is_remote(root):
        write_atomic(path, data)
        return
    if read_version is None:
        written = object_writes.create_if_absent(path, data)
    else:
        written = object_writes.replace_if_version(path, data, read_version)
    if written is not None:
        return
    found = object_writes.read_versioned(path)
    if found is not None and found[0] == data:
        return  # this write landed; its answer was lost and the retry refused
    now = _run_id_of(path, found[0]) if found is not None else None
    raise Superseded(f'{path} changed since this build read it (it names {now or "nothing"} now): another build '
                     f'or publish got there first; run {run_id} was not published')


def write_latest(root: str, run_id: str) -> None:
    """Points LATEST at `run_id`, conditionally on the LATEST it reads first; no lock (tools and tests).

    Raises:
      Superseded: If LATEST changed between the read and the write.
    """
    publish_latest(root, run_id, latest_version(root))


def resolve_index(path: str) -> str:
    """The directory of the index at `path`: the run LATEST names, or `path` itself.

    Raises:
      ValueError: If LATEST names a run that is missing or incomplete.
    """
    run_id = read_latest(path)
    if run_id is None:
        return path
    directory = run_dir(path, run_id)
    if not storage.exists(posixpath.join(directory, MANIFEST_FILE)):
        raise ValueError(f'{path}/{LATEST_FILE} names run {run_id!r}, but {directory} is not a complete run')
    return directory


def list_runs(root: str) -> tuple[list[str], list[str]]:
    """The `(complete, incomplete)` run ids under `root`.

    A run is complete once its manifest.json exists: the build writes it
    last. Complete runs come oldest first by that file's time, so run ids
    need not sort; incomplete ones by name.
    """
    return split_complete(_run_files(root), MANIFEST_FILE)


def _run_files(root: str) -> list[tuple[str, str, float]]:
    runs = posixpath.join(root, RUNS_DIR)
    files = []
    for f in storage.list_files(runs):
        run_id, _, rest = f.path[len(runs) :].lstrip('/').partition('/')
        files.append((run_id, rest, f.mtime))
    return files


def check_root(root: str) -> None:
    """Refuses a `--versioned` output that is neither new, empty nor a versioned root.

    Raises:
      ValueError: If `root` is a file, or a directory holding anything a
        versioned root never holds (a plain index, someone's files).
    """
    if storage.is_remote(root):
        # An object store's "directory" is what lies under its prefix: the first name of each path.
        names = {f.path[len(root.rstrip('/')) + 1 :].split('/', 1)[0] for f in storage.list_files(root)}
    elif not os.path.exists(root):
        return
    elif not os.path.isdir(root):
        raise ValueError(f'--output {root!r} is a file, not a directory')
    else:
        names = set(os.listdir(root))
    foreign = sorted(n for n in names if n not in ROOT_ENTRIES and not n.startswith(f'{LATEST_FILE}.tmp-'))
    if foreign:
        raise ValueError(
            f'--output {root!r} is not a versioned ragsieve root (it holds {", ".join(foreign[:5])}); '
            'refusing to write into it: choose an empty or new directory')


def clean_debris(root: str) -> list[str]:
    """Deletes what killed runs left: incomplete run directories and pointer temporaries.

    Only safe while no other build writes to `root` (see `lock`).

    Returns:
      The deleted paths.
    """
    _, incomplete = list_runs(root)
    debris = [run_dir(root, r) for r in incomplete]
    delete_trees(debris)
    temporaries = [f.path for f in storage.match(posixpath.join(root, f'{LATEST_FILE}.tmp-*'))]
    storage.delete_files(temporaries)
    return debris + temporaries


def prune_runs(root: str, keep: int, grace_seconds: float = 0.0, now: Optional[float] = None) -> list[str]:
    """Deletes complete runs beyond the newest `keep`, never the one LATEST names.

    A run stopped being LATEST when the next run completed (builds point
    LATEST at a run right after its manifest is written); it is spared until
    that is `grace_seconds` old, so a query that read LATEST just before can
    still open its files.

    Returns:
      The deleted run ids.
    """
    if keep < 1:
        raise ValueError(f'keep_runs must be >= 1, got {keep}')
    files = _run_files(root)
    complete, _ = split_complete(files, MANIFEST_FILE)
    completed_at = {d: t for d, name, t in files if name == MANIFEST_FILE}
    now = time.time() if now is None else now
    latest = read_latest(root)
    old = [r for i, r in enumerate(complete[:-keep])
           if r != latest and now - completed_at[complete[i + 1]] >= grace_seconds]
    delete_trees([run_dir(root, r) for r in old])
    return old


@contextlib.contextmanager
def lock(root: str, lease_seconds: float = leases.DEFAULT_SECONDS) -> Iterator[Lock]:
    """Holds an exclusive lock on a root for the length of a build.

    Cleanup deletes what no complete run owns, which would break a second
    build writing to the same root at the same time. Locally the lock is a
    `flock`, released by the kernel even when the holder is killed; on an
    object store a lease object (`storage.leases`) that a killed holder
    stops renewing, so it expires after `lease_seconds`.

    Raises:
      ValueError: If another process holds the lock.
    """
    with lock_file(root, posixpath.join(root, LOCK_FILE), lease_seconds) as held:
        yield held


def plain_lock_path(output: str) -> str:
    """The lock of a plain (not versioned) output: a hidden sibling.

    Not inside the output, which publishing replaces by a rename: a lock
    file there would move away with the old index while a build held it.
    """
    parent, name = posixpath.split(output.rstrip('/'))
    return posixpath.join(parent, f'.{name}.lock')


@contextlib.contextmanager
def lock_file(root: str, path: str, lease_seconds: float = leases.DEFAULT_SECONDS,
              on_takeover: Optional[Callable[[dict], None]] = None) -> Iterator[Lock]:
    """Holds the lock `path` guarding `root` (see `lock`): a local `flock`, or a lease on an object store.

    Locally the file follows no link and must be a regular file
    (`file_locks.open_lock_file`); the lock is held on the file its path
    still names. A lock file inside `root` could be deleted or replaced
    while held, letting a second build take the root and delete this one's
    run as leftovers: the directory `root` itself is locked too, which no
    file operation inside it undoes. A plain output's lock is a sibling
    (`plain_lock_path`).

    Args:
      on_takeover: On an object store, called with the fields of an expired
        lease before it is taken over (`leases.Lease`).

    Yields:
      The lease on an object store, the held lock file locally: either one
      for `check_locks` before committing and publishing.

    Raises:
      ValueError: If another process holds the lock, or the path is a link
        or no regular file.
    """
    if storage.is_remote(root):
        with leases.held(path, root, lease_seconds, on_takeover) as lease:
            yield lease
        return
    directory = os.path.dirname(path) or '.'
    os.makedirs(directory, exist_ok=True)
    held = file_locks.try_lock(path)
    if held is None:
        raise ValueError(f'another ragsieve build is writing to {root} (it holds {os.path.basename(path)})')
    directory_fd = None
    try:
        # Its lock file deleted or replaced under a build that still runs: that build still holds these.
        if os.path.normpath(directory) == os.path.normpath(root):
            directory_fd = file_locks.lock_directory(root)
            if directory_fd is None:
                raise ValueError(f'another ragsieve build is writing to {root} (it holds the directory)')
        else:
            staging = staging_in_use(root)
            if staging is not None:
                raise ValueError(f'another ragsieve build is writing to {root} (it holds {os.path.basename(staging)})')
        yield held
    finally:
        if directory_fd not in (None, -1):
            os.close(directory_fd)
        held.release()


@contextlib.contextmanager
def hold_staging(directory: str) -> Iterator[None]:
    """Creates a plain build's local staging directory and locks it while the build fills it.

    Should the output's sibling lock file be deleted meanwhile, the next
    build finds this directory held (`staging_in_use`) and refuses, instead
    of deleting it as the leftover of a killed run. Object stores: nothing.
    """
    if storage.is_remote(directory):
        yield
        return
    os.makedirs(directory, exist_ok=True)
    fd = file_locks.lock_directory(directory)
    try:
        yield
    finally:
        if fd not in (None, -1):
            os.close(fd)
        # Made here and left without a file by a failed build (`discard` deletes what has files); gone once published.
        if os.path.isdir(directory) and not any(files for _, _, files in os.walk(directory)):
            import shutil

            shutil.rmtree(directory, ignore_errors=True)


def staging_in_use(output: str) -> Optional[str]:
    """A staging directory of `output` (`publish.staging_path`) that a running build holds, or None."""
    import glob

    for path in sorted(glob.glob(glob.escape(output.rstrip('/')) + '.staging-*')):
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        fd = file_locks.lock_directory(path)
        if fd is None:
            return path
        if fd != -1:
            os.close(fd)
    return None


def check_locks(held: Sequence[Lock]) -> None:
    """Before a step that a second build would break (writing its manifest): this build still holds its locks.

    Raises:
      ValueError: If a local lock file was deleted or replaced while held.
      leases.Lost: If an object store's lease was lost (by this process's clock too).
    """
    for lock in held:
        if lock is None:
            continue
        try:
            lock.check()
        except file_locks.LockLost as e:
            raise ValueError(f'{e}; this build stops before publishing: run it again') from None


def lost_lease(held: Sequence[Lock]) -> Optional[str]:
    """Why one of the build's leases is no longer its own (taken over, or not renewed in time: the store did not
    answer), or None: asked while its job runs, which a lost lease ends."""
    for lock in held:
        why = lock.lost() if isinstance(lock, leases.Lease) else None
        if why:
            return why
    return None


def fence_locks(held: Sequence[Lock]) -> None:
    """Right before a commit point (a cache generation, LATEST, a plain publish, pruning): renews each lease now.

    A lease renewed conditionally here is this process's for its safe
    length from now; one lost (taken over, or not renewed in time) stops
    the commit. A local lock is checked: the kernel holds a `flock`
    through any pause of its holder.

    Raises:
      ValueError: If a local lock file was deleted or replaced while held.
      leases.Lost: If an object store's lease was lost.
    """
    check_locks(held)
    for lock in held:
        if isinstance(lock, leases.Lease):
            lock.fence()
