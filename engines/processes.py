"""Starting and stopping an engine's daemons: free ports, logs, readiness, a clean stop; a cluster's common part."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Optional, Sequence

from engines import fetch


class EngineFailed(RuntimeError):
    """A daemon of the engine exited or did not become ready; the message names its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 no one listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def start(command: Sequence[str], log: Path, env: Optional[dict] = None) -> subprocess.Popen:
    """Starts a daemon in its own process group (so a stop reaches its children), output into `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, 'ab') as out:
        return subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)


def read_json(url: str) -> Optional[dict]:
    """The JSON a daemon's HTTP endpoint answers, or None while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)
    except (OSError, urllib.error.URLError, ValueError):
        return None


# What a JVM daemon logs when a port it was given is taken (Java's BindException; Spark's retry on the next port).
BIND_FAILURES = ('Address already in use', 'BindException', 'could not bind on port', 'Failed to bind')


def bind_failure(log_text: str) -> Optional[str]:
    """The first line of a daemon's log that says a port of its was taken, or None."""
    for line in log_text.splitlines():
        if any(marker in line for marker in BIND_FAILURES):
            return ' '.join(line.split())[:300]
    return None


def log_tail(path: Path, size: int = 200_000) -> str:
    """The end of a daemon's log ('' while it has none)."""
    try:
        with open(path, 'rb') as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode('utf-8', 'replace')
    except OSError:
        return ''


def wait_until(ready: Callable[[], bool], processes: dict[str, subprocess.Popen], logs: dict[str, Path],
               timeout: float, what: str) -> None:
    """Waits until `ready()`, failing at once when one of `processes` exits or logs that its port is taken.

    Raises:
      EngineFailed: Naming the daemon that exited or could not bind, or what did not happen in time, and the logs.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        for name, process in processes.items():
            if process.poll() is not None:
                raise EngineFailed(f'{name} exited with status {process.returncode} before {what}: see {logs[name]}')
            taken = bind_failure(log_tail(logs[name]))
            if taken:  # a daemon may live on without its port (Spark tries the next one): it is of no use
                raise EngineFailed(f'{name} could not bind a port of its ({taken}): see {logs[name]}')
        if time.monotonic() > deadline:
            raise EngineFailed(f'no {what} after {timeout:.0f} s: see {", ".join(map(str, logs.values()))}')
        time.sleep(0.5)


def stop(process: subprocess.Popen, grace: float = 30) -> None:
    """Stops a daemon and its children: SIGTERM to its group, SIGKILL after `grace` seconds."""
    if process.poll() is None:
        signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(process, signal.SIGKILL)
            process.wait()
    signal_group(process, signal.SIGKILL)  # children left behind by a daemon that exited


def kill(process: subprocess.Popen) -> None:
    """kill -9 of the daemon alone, as a crash: its children (SDK workers) are left to notice."""
    process.send_signal(signal.SIGKILL)
    process.wait()


def signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Cluster:
    """What every local cluster shares: its directory, daemons and logs, Java, its job server; a context manager.

    Subclasses set `engine` and implement `start` (returning self once the
    cluster is ready) and `build_flags`.

    Args:
      directory: Where its configuration, logs and temporary files go.
      env: Environment variables for its daemons, which the processes they
        start (executors, SDK workers) inherit (OMP_NUM_THREADS, ...).

    Raises:
      fetch.EngineMissing: Without Java, the engine's wheel or its job server.
    """

    engine = None

    def __init__(self, directory: Path, env: Optional[dict] = None):
        self.directory = Path(directory)
        self.env = dict(env or {})
        self.dist = fetch.distribution(self.engine)
        self.java = fetch.java()
        self.job_server = fetch.job_server_jar(self.engine)
        self.daemons: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def start(self, timeout: float = 120) -> 'Cluster':
        raise NotImplementedError

    def beam_jars(self, skip: tuple = ('slf4j-',)) -> list[str]:
        """The job server's jars but those whose names start with `skip` (what the engine ships itself)."""
        lib = fetch.job_server_dir(self.engine) / 'lib'
        return [str(p) for p in sorted(lib.glob('*.jar')) if not p.name.startswith(skip)]

    def launch(self, name: str, command: Sequence[str], log: Path, env: Optional[dict] = None) -> None:
        """Starts daemon `name`, its output into `log`."""
        self.logs[name] = log
        self.daemons[name] = start(command, log, {**self.env, **(env or {})})

    def stop(self) -> None:
        for process in reversed(list(self.daemons.values())):
            stop(process)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
