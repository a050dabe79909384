"""Peak memory of a process tree, sampled from /proc: shared by the scale and runner-memory benchmarks."""

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
    """Samples the peak RSS (VmHWM, KiB) of a process and all its descendants."""

    def __init__(self, pid: int, every: float):
        super().__init__(daemon=True)
        self.pid = pid
        self.every = every
        self.peaks: dict[int, int] = {}
        self.cmdlines: dict[int, str] = {}
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            todo, seen = [self.pid], set()
            while todo:
                pid = todo.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                s = _status(pid)
                if s:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), s.get('VmHWM', 0))
                    self.cmdlines.setdefault(pid, s.get('cmdline', ''))
                todo.extend(_children(pid))
            self._done.wait(self.every)

    def stop(self):
        self._done.set()
        self.join()
