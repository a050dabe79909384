"""What `python -m engines start` records of a cluster (cluster.json), and whether its daemons still run.

A PID alone names whatever process holds it now: once a daemon has exited
the kernel gives its number to the next process, and signalling it would
reach a stranger. So each daemon is recorded with what the kernel says of
it (`identity`: its start time since boot and its command line, from
/proc), and a recorded daemon counts as running only while the process with
its PID has the same identity.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

STATE_FILE = 'cluster.json'
FLAGS_FILE = 'build_flags'
PROC = Path('/proc')


class BadState(ValueError):
    """A cluster.json that is no state `start` wrote; the message names the file and what to do."""


def parse_stat(stat: str) -> int:
    """The start time (clock ticks after boot) in a /proc/PID/stat line.

    The command name in parentheses may hold spaces and parentheses of its
    own: the fields are counted after its last ')'. The start time is the
    22nd field, the 20th after the name.
    """
    return int(stat[stat.rindex(')') + 2:].split()[19])


def identity(pid: int, proc: Path = PROC) -> Optional[dict]:
    """`{'pid', 'start', 'cmdline'}` of the process `pid` now, or None when no process has it."""
    try:
        start = parse_stat((proc / str(pid) / 'stat').read_text())
        cmdline = (proc / str(pid) / 'cmdline').read_bytes().decode('utf-8', 'replace').split('\0')
    except (OSError, ValueError, IndexError):
        return None
    return {'pid': pid, 'start': start, 'cmdline': [a for a in cmdline if a] if cmdline else []}


def same_process(recorded: dict, now: Optional[dict]) -> bool:
    """Whether `now` (an `identity`) is the process `recorded`, not another that took its PID."""
    return (now is not None and now['pid'] == recorded['pid'] and now['start'] == recorded['start']
            and now['cmdline'] == recorded['cmdline'])


def running(state: dict, proc: Path = PROC) -> dict[str, dict]:
    """The daemons of `state` that still run, by name."""
    return {name: d for name, d in state['daemons'].items() if same_process(d, identity(d['pid'], proc))}


def read(directory: Path) -> Optional[dict]:
    """The state recorded under `directory`, or None when there is none.

    Raises:
      BadState: If cluster.json cannot be read as a state `start` wrote.
      OSError: If it cannot be read at all (a permission).
    """
    path = directory / STATE_FILE
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
        daemons = state['daemons']
        ok = isinstance(state['engine'], str) and isinstance(daemons, dict) and all(
            isinstance(d['pid'], int) and isinstance(d['start'], int) and isinstance(d['cmdline'], list)
            for d in daemons.values())
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        ok, why = False, f'{type(e).__name__}: {e}'
    else:
        why = 'fields missing or of the wrong type'
    if not ok:
        raise BadState(f'{path} is not the state of a cluster that `python -m engines start` wrote ({why}); '
                       'stop its daemons by hand if any run, then delete it')
    return state


def write(directory: Path, state: dict) -> None:
    """Records `state` (and its build flags, for `$(cat DIR/build_flags)`) under `directory`."""
    (directory / STATE_FILE).write_text(json.dumps(state, indent=1))
    (directory / FLAGS_FILE).write_text(' '.join(state['build_flags']) + '\n')


def describe(state: dict, names=None) -> str:
    """`flink (http://127.0.0.1:8081; jobmanager 123, taskmanager-0 124)`, of the daemons `names` (all by default)."""
    names = state['daemons'] if names is None else names
    pids = ', '.join(f'{n} {state["daemons"][n]["pid"]}' for n in names)
    return f'{state["engine"]} ({state.get("ui", "no UI")}; {pids})'
