"""Flink's REST API as a build sees it: the TaskManagers' hosts, the build's job (its progress, its failures), its
cancellation. Pure readers of the API's JSON beside the calls that fetch it; `engine_job` decides what to do.
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.request
from typing import Any, Optional

# Flink's job states after which a job runs no more.
TERMINAL = ('FINISHED', 'FAILED', 'CANCELED', 'SUSPENDED')
# A Flink vertex's metrics that move while its tasks exchange records.
METRICS = ('read-records', 'write-records', 'read-bytes', 'write-bytes')
# A Flink vertex's states in which its tasks hold slots and work: deployed, opening (an SDK worker's start and
# model load), running. CREATED and SCHEDULED wait for slots.
WORKING = ('DEPLOYING', 'INITIALIZING', 'RUNNING')


@dataclasses.dataclass(frozen=True)
class EngineLook:
    """What an engine shows of a job at one look.

    Attributes:
      running: Whether any of the job's tasks works (deployed, opening or running; not waiting for slots,
        restarting or done).
      progress: What moves while the job does: its state, its vertices' states and record counts.
    """

    running: bool
    progress: object


def read_json(url: str, timeout: float = 5.0, kind: type = dict) -> Optional[Any]:
    """The JSON value of type `kind` at `url` (an object by default; Spark's REST API answers lists too); None
    when nothing answers there or it is of another type."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            value = json.load(answer)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, kind) else None


def taskmanager_hosts(rest: str) -> list[str]:
    """The hosts of the TaskManagers registered with Flink (from their RPC paths); [] when Flink does not answer."""
    hosts = []
    for manager in (read_json(f'{rest}/taskmanagers') or {}).get('taskmanagers', []):
        # pekko.tcp://flink@HOST:PORT/user/rpc/taskmanager_0 (akka.tcp:// before Flink 1.18)
        found = re.search(r'@(\[[^\]]+\]|[^:/@\[]+):\d+', str(manager.get('path', '')))
        if found and found.group(1).strip('[]') not in hosts:
            hosts.append(found.group(1).strip('[]'))
    return hosts


def job_look(job: dict) -> EngineLook:
    """What a job's details on Flink's REST API (`/jobs/JID`) say of its progress."""
    vertices = [v for v in job.get('vertices', []) if isinstance(v, dict)]
    running = job.get('state') == 'RUNNING' and any(v.get('status') in WORKING for v in vertices)
    moved = tuple((v.get('id'), v.get('status'), tuple((v.get('metrics') or {}).get(k) for k in METRICS))
                  for v in vertices)
    return EngineLook(running, (job.get('state'), moved))


def latest_job(rest: str, name: str) -> Optional[str]:
    """The id of the latest Flink job named `name`; None when Flink does not answer or runs no such job yet."""
    jobs = [j for j in (read_json(f'{rest}/jobs/overview') or {}).get('jobs', []) if j.get('name') == name]
    return max(jobs, key=lambda j: j.get('start-time') or 0).get('jid') if jobs else None


def look(rest: str, name: str) -> Optional[EngineLook]:
    """Flink's view of the latest job named `name`; None when Flink does not answer or runs no such job yet."""
    jid = latest_job(rest, name)
    job = read_json(f'{rest}/jobs/{jid}') if jid else None
    return job_look(job) if job else None


def failure_line(exceptions: dict) -> Optional[str]:
    """The latest failure in a job's exception history (`/jobs/JID/exceptions`), in one line: the exception's
    first line and the TaskManager where it happened, by its address (a lost TaskManager's id is in the first
    line)."""
    entries = [e for e in (exceptions.get('exceptionHistory') or {}).get('entries', []) if isinstance(e, dict)]
    if not entries:
        return None
    latest = max(entries, key=lambda e: e.get('timestamp') or 0)
    first = next((line.strip() for line in str(latest.get('stacktrace') or '').splitlines() if line.strip()),
                 str(latest.get('exceptionName') or 'an exception'))
    host = address(latest)
    return first[:400] + (f' (on TaskManager {host})' if host else '')


def failure_times(exceptions: dict) -> list[float]:
    """When each failure of a job's exception history (`/jobs/JID/exceptions`) happened, in seconds since the
    epoch: each is a restart of the job where restarts are left."""
    entries = (exceptions.get('exceptionHistory') or {}).get('entries', [])
    return sorted(e['timestamp'] / 1000 for e in entries
                  if isinstance(e, dict) and isinstance(e.get('timestamp'), (int, float)))


def address(entry: dict) -> Optional[str]:
    """`HOST:PORT` of the TaskManager where an exception history entry happened (its host where Flink gives no
    port); None if unknown."""
    location = entry.get('taskManagerLocation')
    if isinstance(location, dict) and location.get('host'):
        return f"{location['host']}:{location['port']}" if location.get('port') else str(location['host'])
    return str(entry['location']) if entry.get('location') else None


def where(entry: dict) -> Optional[str]:
    """The host of the TaskManager where an exception history entry happened, without its port; None if unknown."""
    found = address(entry)
    return re.sub(r':\d+$', '', found) if found else None


def cancel_jobs(rest: str, name: str, timeout: float = 5.0) -> list[str]:
    """Cancels the Flink jobs named `name` that still run, through Flink's REST API; returns their ids."""
    with urllib.request.urlopen(f'{rest}/jobs/overview', timeout=timeout) as answer:
        jobs = json.load(answer).get('jobs', [])
    cancelled = []
    for job in jobs:
        if job.get('name') == name and job.get('state') not in TERMINAL:
            request = urllib.request.Request(f'{rest}/jobs/{job["jid"]}?mode=cancel', method='PATCH')
            with urllib.request.urlopen(request, timeout=timeout):
                cancelled.append(job['jid'])
    return cancelled


# How Java says a TaskManager could not start a PROCESS environment's command (ProcessBuilder's IOException).
_NO_PROGRAM = re.compile(r'Cannot run program "([^"]+)"[^:\n]*: error=(?:2|13), ([^\n]+)')


def missing_program_line(exceptions: dict) -> Optional[str]:
    """The failure no restart mends, from a job's exception history: a TaskManager that cannot start the SDK
    worker's command (no such file, or not executable, on its host), in one line naming the program and the
    host; None otherwise."""
    for entry in (exceptions.get('exceptionHistory') or {}).get('entries', []):
        found = _NO_PROGRAM.search(str(entry.get('stacktrace') or '')) if isinstance(entry, dict) else None
        if found:
            host = where(entry)
            return (f'the SDK worker command {found.group(1)} cannot run on TaskManager '
                    f'{host or "(host unknown)"} ({found.group(2).strip()}): install ragsieve at the same path on '
                    "every worker host, or name the command there with --environment_config "
                    "'{\"command\": \"/path/to/ragsieve-sdk-worker\"}'")
    return None
