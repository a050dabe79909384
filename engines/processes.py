"""Starting and stopping an engine's daemons: free ports, logs, readiness, a clean stop."""

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


def wait_until(ready: Callable[[], bool], processes: dict[str, subprocess.Popen], logs: dict[str, Path],
               timeout: float, what: str) -> None:
    """Waits until `ready()`, failing at once when one of `processes` exits.

    Raises:
      EngineFailed: Naming the daemon that exited, or what did not happen in time, and the logs.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        for name, process in processes.items():
            if process.poll() is not None:
                raise EngineFailed(f'{name} exited with status {process.returncode} before {what}: see {logs[name]}')
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
