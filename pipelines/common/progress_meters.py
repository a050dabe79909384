"""What a progress view shows, as data and as text: a meter, a step, a count's rate; durations, sizes, lines.

Pure: no thread, no terminal. `progress.View` keeps the counts and draws
these; `progress_bar.Bar` draws them with rich.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from typing import Callable, Mapping, Optional, Sequence, Union

# A rate is measured over this many seconds of its count's samples: steady, yet it follows a slowdown.
RATE_WINDOW = 60.0

Counts = Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class Meter:
    """One line of the view.

    Attributes:
      label: What it counts, a word (`embed`).
      key: The count shown; None for a line of `note` alone.
      unit: The count's unit (`chunks`).
      total: The count's total, or a function of all counts giving it (None: not known yet).
      rate: Show the count's rate and, with a total, the time left.
      note: A function of all counts giving more text (`1,203 documents`).
    """

    label: str
    key: Optional[str] = None
    unit: str = ''
    total: Union[None, int, Callable[[Counts], Optional[int]]] = None
    rate: bool = False
    note: Optional[Callable[[Counts], str]] = None

    def total_of(self, counts: Counts) -> Optional[int]:
        return self.total(counts) if callable(self.total) else self.total


class Rate:
    """A count's rate over the last `window` seconds, from samples taken as it grows.

    While the count has not moved since the first sample, only the latest
    sample is kept: the rate starts when the work does, not when the view did.
    """

    def __init__(self, window: float = RATE_WINDOW):
        self._window = window
        self._samples: collections.deque = collections.deque()

    def add(self, t: float, value: int) -> None:
        samples = self._samples
        if samples and samples[0][1] == samples[-1][1] == value:
            samples[-1] = (t, value)
        else:
            samples.append((t, value))
        while len(samples) > 2 and samples[1][0] <= t - self._window:
            samples.popleft()

    @property
    def latest(self) -> Optional[int]:
        """The last value added, or None."""
        return self._samples[-1][1] if self._samples else None

    def per_second(self) -> Optional[float]:
        """Units per second, or None before the count moved (or when it cannot be told: never an error)."""
        if len(self._samples) < 2:
            return None
        (t0, v0), (t1, v1) = self._samples[0], self._samples[-1]
        try:
            rate = (v1 - v0) / (t1 - t0) if t1 > t0 and v1 > v0 else None
        except (ArithmeticError, TypeError):  # a count too large for a float: no rate, never a failed build
            return None
        return rate if rate is None or math.isfinite(rate) else None


class Step:
    """A step under way; set `detail` to say what it found (`237 files, 12.3 MB`)."""

    def __init__(self, name: str, detail: str = ''):
        self.name, self.detail = name, detail
        self.started = time.monotonic()
        self.seconds: Optional[float] = None


def duration(seconds: float) -> str:
    """`42s`, `3m04s`, `1h02m`; `?` for what is no time (infinite, not a number)."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return '?'
    s = max(0, round(seconds))
    if s < 60:
        return f'{s}s'
    if s < 3600:
        return f'{s // 60}m{s % 60:02d}s'
    return f'{s // 3600}h{s % 3600 // 60:02d}m'


def size(n_bytes: int) -> str:
    """`512 B`, `12.3 kB`, `4.5 MB`, `1.2 GB` (powers of 1000)."""
    value = float(n_bytes)
    for unit in ('B', 'kB', 'MB', 'GB'):
        if value < 1000 or unit == 'GB':
            return f'{value:.0f} {unit}' if unit == 'B' else f'{value:.1f} {unit}'
        value /= 1000
    raise AssertionError  # the loop returns at GB


def meter_text(meter: Meter, counts: Counts, rate: Optional[float] = None) -> str:
    """A meter's figures: `2,048/4,800 chunks, 42.7 chunks/s, ETA 1m04s` and its note."""
    parts = []
    if meter.key is not None:
        done, total = counts.get(meter.key, 0), meter.total_of(counts)
        unit = f' {meter.unit}' if meter.unit else ''
        parts.append(f'{done:,}/{total:,}{unit}' if total is not None else f'{done:,}{unit}')
        if meter.rate and rate:
            parts.append(f'{rate:,.1f}{unit}/s')
            if total is not None and total > done:
                try:
                    parts.append(f'ETA {duration((total - done) / rate)}')
                except ArithmeticError:  # counts too large for a float: no ETA
                    pass
    if meter.note is not None:
        note = meter.note(counts)
        if note:
            parts.append(note)
    return ', '.join(parts)


def log_line(elapsed: float, lines: Sequence[tuple[str, str]], step: Optional[tuple[str, float]] = None) -> str:
    """One timed line: `progress 1m30s: read 237/237 files; embed 2,048/4,800 chunks, ...`.

    Args:
      elapsed: Seconds since the job started.
      lines: `(label, meter_text)` of each meter.
      step: `(name, seconds)` of the step running, if one is.
    """
    shown = [f'{label} {text}' for label, text in lines if text]
    if step is not None:
        shown.insert(0, f'{step[0]} (running {duration(step[1])})')
    return f'progress {duration(elapsed)}: ' + ('; '.join(shown) or 'starting')


def duration_precise(seconds: float) -> str:
    """A step's time: `0.4 s`, `12.1 s`, then as `duration`."""
    return f'{seconds:.1f} s' if seconds < 60 else duration(seconds)
