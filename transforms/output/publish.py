"""Publishing a plain build: staging directories, the atomic swap, cleanup of killed runs."""

from __future__ import annotations

import posixpath
from typing import Iterable

from transforms import storage
from transforms.storage import object_writes
from transforms.output.tables import MANIFEST_FILE

# Test seam: a build whose environment names one of its checkpoints kills
# itself there with SIGKILL, exactly like `kill -9` at that point.
KILL_AT_ENV = 'RAGSIEVE_KILL_AT'
# Test seam: ... or stops itself there with SIGSTOP, as a long pause would (a test sends SIGCONT).
STOP_AT_ENV = 'RAGSIEVE_STOP_AT'
# In a plain output on an object store while `publish` replaces it: the staging it publishes.
PUBLISHING_FILE = '.publishing'


def staging_path(output: str) -> str:
    """A fresh sibling of `output` that a run fills before publishing it."""
    import os
    import time

    return f'{output.rstrip("/")}.staging-{os.getpid()}-{time.time_ns()}'


def clean_staging(output: str) -> list[str]:
    """Deletes the staging directories that killed plain builds left next to `output`.

    Only safe while no other build writes to `output` (its lock is held).
    Locally, a build killed between the two renames of `publish` left no
    `output` but the previous index whole as `*.old`: that one is put back,
    not deleted. On an object store, a publish killed midway (its marker is
    in `output`) is finished from its staging, which is complete by then.

    Returns:
      The deleted paths.
    """
    if storage.is_remote(output):
        marker = posixpath.join(output, PUBLISHING_FILE)
        if storage.exists(marker):
            staging = storage.read_bytes(marker).decode('utf-8').strip()
            if storage.is_within(staging, storage.parent(output)) and storage.exists(
                    posixpath.join(staging, MANIFEST_FILE)):
                publish(staging, output)
            else:
                storage.delete_files([marker])
        leftovers = sorted({f.path[: f.path.index('/', len(output.rstrip('/')))]
                            for f in storage.match(output.rstrip('/') + '.staging-*/**')})
        storage.delete_trees(leftovers)
        return leftovers
    import glob
    import os
    import shutil

    leftovers = sorted(glob.glob(glob.escape(output.rstrip('/')) + '.staging-*'))
    previous = [p for p in leftovers if p.endswith('.old') and os.path.isdir(p)]
    if previous and not os.path.exists(output):
        newest = max(previous, key=os.path.getmtime)
        os.rename(newest, output)
        leftovers.remove(newest)
    for path in leftovers:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    return leftovers


def check_replaceable(output: str) -> None:
    """Refuses to replace a non-empty directory that is not a ragsieve output.

    Raises:
      ValueError: if `output` is a file, or holds files but no manifest.json.
    """
    if not storage.is_remote(output):
        import os

        if not os.path.exists(output):
            return
        if not os.path.isdir(output):
            raise ValueError(f'--output {output!r} is a file, not a directory: refusing to replace it')
    found = storage.list_files(output)
    if not found or storage.exists(posixpath.join(output, MANIFEST_FILE)) or storage.exists(
            posixpath.join(output, PUBLISHING_FILE)):
        return
    raise ValueError(
        f'--output {output!r} is a non-empty directory without {MANIFEST_FILE}; '
        'refusing to replace it: choose an empty or new directory'
    )


def publish(staging: str, output: str) -> None:
    """Moves a finished run from `staging` to `output`, replacing the previous index whole.

    Locally two directory renames: the old index stays whole until the new
    one is complete. An object store has no rename of a prefix: a marker
    naming the staging is written into `output` first, then the old
    manifest is deleted (readers refuse the index from here on, never mix
    it), the old files, the new files are moved in, the manifest last, and
    the marker goes. A publish killed midway is finished by the next build
    (`clean_staging`). Readers that need an atomic switch use `--versioned`.
    """
    if not storage.is_remote(output):
        import os
        import shutil

        old = None
        if os.path.exists(output):
            old = staging + '.old'
            os.rename(output, old)
        os.rename(staging, output)
        if old:
            shutil.rmtree(old)
        return
    marker = posixpath.join(output, PUBLISHING_FILE)
    storage.write_bytes(marker, f'{staging}\n'.encode('utf-8'))
    storage.delete_files([posixpath.join(output, MANIFEST_FILE)])
    storage.delete_files([f.path for f in storage.list_files(output) if f.path != marker])
    last = posixpath.join(staging, MANIFEST_FILE)
    sources = [f.path for f in storage.list_files(staging) if f.path != last]
    storage.move_files(sources, [output.rstrip('/') + source[len(staging) :] for source in sources])
    # The manifest last: it makes the index complete. Written only where none is: a second writer that
    # published meanwhile (its lease lost, a plain output shared by hand) is found, not overwritten.
    manifest = posixpath.join(output, MANIFEST_FILE)
    if object_writes.create_if_absent(manifest, storage.read_bytes(last)) is None:
        raise ValueError(f'{manifest} was written by another build while this one published into {output}: '
                         'rebuild it (a --versioned root never mixes two builds)')
    storage.delete_files([last, marker])
    storage.delete_trees([staging])


def split_complete(files: Iterable[tuple[str, str, float]], marker: str) -> tuple[list[str], list[str]]:
    """Splits directories into complete (holding `marker`) and incomplete ones.

    Args:
      files: `(directory, file name, mtime)` of the files found.
      marker: The file a writer creates last, when the directory is complete.

    Returns:
      `(complete, incomplete)`: complete ones oldest first by their marker's
      time (names need not sort in run order), incomplete ones by name.
    """
    seen = set()
    completed_at: dict[str, float] = {}
    for directory, name, mtime in files:
        seen.add(directory)
        if name == marker:
            completed_at[directory] = mtime
    complete = sorted(completed_at, key=lambda d: (completed_at[d], d))
    return complete, sorted(seen - set(complete))


def checkpoint(name: str) -> None:
    """Kills (SIGKILL) or stops (SIGSTOP) this process when the environment names this point (tests only)."""
    import os
    import signal

    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(STOP_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGSTOP)
