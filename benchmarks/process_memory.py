"""Peak memory and CPU time of process trees, sampled from /proc: shared by the scale, runner-memory and engines benchmarks."""

import os
import threading


def _status(pid: int) -> dict:
    values = {}
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                key, _, rest = line.partition(':')
                if key in ('VmHWM', 'VmRSS', 'PPid'):
                    values[key] = int(rest.split()[0])
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            values['cmdline'] = f.read().replace(b'\0', b' ').decode(errors='replace')
    except (OSError, ValueError):
        return {}
    return values


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` so far (0 once it has exited)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir('/proc'):
        if task.isdigit():
            try:
                with open(f'/proc/{task}/stat') as f:
                    ppid = int(f.read().rsplit(')', 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                out.append(int(task))
    return out


class TreeSampler(threading.Thread):
    """Samples the peak RSS (VmHWM, KiB) and CPU seconds of processes and all their descendants.

    `cpu` holds each process's CPU seconds at its last sample: a process
    that exits loses what it spent after that (at most `every` seconds).
    """

    def __init__(self, pid, every: float):
        super().__init__(daemon=True)
        # Roots: a pid, pids, or a callable giving them anew each round (processes of hosts that come and go).
        self._roots = pid if callable(pid) else (lambda: [pid] if isinstance(pid, int) else list(pid))
        self.pids = self._roots()
        self.every = every
        self.peaks: dict[int, int] = {}
        self.cpu: dict[int, float] = {}
        self.cmdlines: dict[int, str] = {}
        self._done = threading.Event()

    @property
    def pid(self) -> int:
        return self.pids[0]

    def run(self):
        while not self._done.is_set():
            todo, seen = list(self._roots()), set()
            while todo:
                pid = todo.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                s = _status(pid)
                if s:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), s.get('VmHWM', 0))
                    self.cpu[pid] = max(self.cpu.get(pid, 0.0), _cpu_seconds(pid))
                    # The latest: a daemon's script execs its JVM in the same process.
                    self.cmdlines[pid] = s.get('cmdline') or self.cmdlines.get(pid, '')
                todo.extend(_children(pid))
            self._done.wait(self.every)

    def stop(self):
        self._done.set()
        self.join()
