"""Publishing a plain build: staging directories, the atomic swap, cleanup of killed runs."""

from __future__ import annotations

import posixpath
from typing import Iterable

from apache_beam.io.filesystems import FileSystems

from transforms import storage
from transforms.output.tables import MANIFEST_FILE

# Test seam: a build whose environment names one of its checkpoints kills
# itself there with SIGKILL, exactly like `kill -9` at that point.
KILL_AT_ENV = 'RAGSIEVE_KILL_AT'


def staging_path(output: str) -> str:
    """A fresh sibling of `output` that a run fills before publishing it."""
    import os
    import time

    return f'{output.rstrip("/")}.staging-{os.getpid()}-{time.time_ns()}'


def clean_staging(output: str) -> list[str]:
    """Deletes the staging directories that killed plain builds left next to `output`.

    Only safe while no other build writes to `output` (its lock is held). A
    build killed between the two renames of `publish` left no `output` but
    the previous index whole as `*.old`: that one is put back, not deleted.
    Local outputs only; object stores are published file by file.

    Returns:
      The deleted paths.
    """
    if storage.is_remote(output):
        return []
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
    if not FileSystems.exists(output):
        return
    if not storage.is_remote(output):
        import os

        if not os.path.isdir(output):
            raise ValueError(f'--output {output!r} is a file, not a directory: refusing to replace it')
    if FileSystems.exists(posixpath.join(output, MANIFEST_FILE)):
        return
    if FileSystems.match([output.rstrip('/') + '/**'], limits=[1])[0].metadata_list:
        raise ValueError(
            f'--output {output!r} is a non-empty directory without {MANIFEST_FILE}; '
            'refusing to replace it: choose an empty or new directory'
        )


def publish(staging: str, output: str) -> None:
    """Moves a finished run from `staging` to `output`, replacing the previous index.

    Locally two directory renames: the old index stays whole until the new one
    is complete. On object stores files are moved one by one (versioned
    outputs, with a LATEST pointer, give readers an atomic switch there).
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
    if FileSystems.exists(output):
        FileSystems.delete([output])
    sources = sorted(m.path for m in FileSystems.match([staging + '/**'])[0].metadata_list)
    FileSystems.rename(sources, [output.rstrip('/') + s[len(staging) :] for s in sources])
    FileSystems.delete([staging])


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
    """Kills this process with SIGKILL when the environment names this point (tests only)."""
    import os

    if os.environ.get(KILL_AT_ENV) == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
