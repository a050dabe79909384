"""`ragsieve-java`: the `java` a build's Beam job server runs under, killed with the build however the build dies.

Beam's FlinkRunner and SparkRunner start their job server (a JVM) as a
child of the launcher and stop it when the launcher exits; a launcher killed
by SIGKILL (the kernel's OOM killer, a scheduler's timeout, `kill -9`) stops
nothing, and the JVM ran on, holding the job. The build names this program
as Beam's `--job_server_java_launcher` (`runners.with_engine_defaults`): it
asks the kernel to SIGKILL it when its parent dies (PR_SET_PDEATHSIG, kept
across exec), then becomes `java` with Beam's arguments. Linux only: elsewhere
it is plain `java`. The kernel sends the signal when the *thread* that
started the JVM ends: Beam starts it from the thread that submits the
pipeline, which then waits for the job (`engine_job.wait`) until it ends.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
from typing import Optional, Sequence

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> bool:
    """Asks for SIGKILL when this process's parent dies; False where the parent is already gone (or this is not
    Linux, where nothing is asked)."""
    if not sys.platform.startswith('linux'):
        return True
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    return os.getppid() == parent  # a parent that died before the call: no signal will come


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    java = shutil.which('java')  # as Beam's default launcher finds it
    if not java:
        sys.exit('ragsieve-java: no java on PATH: install Java 17 (docs/operations.md, Engines)')
    if not die_with_parent(os.getppid()):
        sys.exit('ragsieve-java: the build that started this job server is gone')
    os.execv(java, [java, *argv])


if __name__ == '__main__':
    main()
