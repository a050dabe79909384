"""How a job says how far it is: a live view on a terminal, a timed line in a log, or nothing.

A `View` shows the job's named steps with their times, then its meters: a
count, its total when one is known, its rate and ETA when asked. The job
adds to the counts itself (`View.add`) or hands the view sources of counts
other processes made (`build_progress.Listener`). `--progress auto` draws
it with rich on a terminal (stderr) and logs one line every
`--progress_interval` seconds elsewhere (cron, Airflow, CI).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import sys
import threading
import time
from typing import Callable, Iterator, Mapping, Optional, Sequence, Union

AUTO, BAR, LOG, NONE = 'auto', 'bar', 'log', 'none'
MODES = (AUTO, BAR, LOG, NONE)
DEFAULT_INTERVAL = 30.0
# A rate is measured over this many seconds of its count's samples: steady, yet it follows a slowdown.
RATE_WINDOW = 60.0
# How often the view samples the counts (and redraws the bar).
TICK_SECONDS = 0.5

Counts = Mapping[str, int]


def add_flags(parser) -> None:
    """Adds `--progress` and `--progress_interval` to an argparse parser (or a Beam options parser)."""
    parser.add_argument('--progress', type=str, default=AUTO, choices=MODES,
                        help='auto: a live view on a terminal (stderr), one timed line in logs elsewhere; '
                             'bar, log: either one; none: neither.')
    parser.add_argument('--progress_interval', type=float, default=DEFAULT_INTERVAL,
                        help='Seconds between two lines of --progress log (auto off a terminal).')


def resolve_mode(mode: str, stream=None) -> str:
    """`auto` -> `bar` when `stream` (stderr by default) is a terminal, `log` otherwise; other modes stay.

    Raises:
      ValueError: For a mode outside `MODES`.
    """
    if mode not in MODES:
        raise ValueError(f'--progress must be one of {list(MODES)}, got {mode!r}')
    if mode != AUTO:
        return mode
    stream = sys.stderr if stream is None else stream
    return BAR if getattr(stream, 'isatty', lambda: False)() else LOG


def check_interval(seconds: float) -> float:
    """Returns `seconds`.

    Raises:
      ValueError: Unless it is a finite number > 0.
    """
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f'--progress_interval must be a number of seconds > 0, got {seconds}')
    return seconds


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


class Step:
    """A step under way; set `detail` to say what it found (`237 files, 12.3 MB`)."""

    def __init__(self, name: str, detail: str = ''):
        self.name, self.detail = name, detail
        self.started = time.monotonic()
        self.seconds: Optional[float] = None


def no_step(name: str, detail: str = ''):
    """A stand-in for `View.step` where nothing is shown."""
    return contextlib.nullcontext(Step(name, detail))


class View:
    """The steps and meters of one job, rendered as its mode says; a context manager.

    Args:
      mode: One of `MODES` (`auto` resolved against `stream`).
      interval: Seconds between two lines in `log` mode.
      logger: Where `log` mode writes its lines (and the steps'), at INFO.
      stream: The terminal of `bar` mode; stderr by default.
    """

    def __init__(self, mode: str = AUTO, interval: float = DEFAULT_INTERVAL,
                 logger: logging.Logger = logging.getLogger('ragsieve'), stream=None):
        self._stream = sys.stderr if stream is None else stream
        self.mode = resolve_mode(mode, self._stream)
        self._interval = check_interval(interval)
        self._logger = logger
        self._lock = threading.RLock()
        self._local: collections.Counter = collections.Counter()
        self._final: Optional[dict] = None
        self._sources: list[Callable[[], Counts]] = []
        self._meters: list[Meter] = []
        self._rates: dict[str, Rate] = {}
        self._rated: list[Meter] = []
        self._step: Optional[Step] = None
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._bar = None

    @property
    def enabled(self) -> bool:
        return self.mode != NONE

    def __enter__(self) -> 'View':
        if not self.enabled:
            return self
        if self.mode == BAR:
            self._bar = _Bar(self._stream)
        self._thread = threading.Thread(target=self._run, name='ragsieve-progress', daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self._bar is not None:
            bar, self._bar = self._bar, None
            try:
                self._safely(self._draw_on, bar)
            finally:
                bar.close()  # the cursor shown again, whatever happened

    # --- what the job says ---

    @contextlib.contextmanager
    def step(self, name: str, detail: str = '') -> Iterator[Step]:
        """Times a named step (`load embedding model`); shown when it starts and with its time when done."""
        step = Step(name, detail)
        if not self.enabled:
            yield step
            return
        with self._lock:
            self._step = step
            if self._bar is not None:
                self._bar.start_step(step)
        try:
            yield step
        finally:
            step.seconds = time.monotonic() - step.started
            with self._lock:
                self._step = None
                if self._bar is not None:
                    self._bar.end_step(step)
            if self.mode == LOG:
                detail = f' ({step.detail})' if step.detail else ''
                self._logger.info('%s%s: %s', step.name, detail, duration_precise(step.seconds))

    def show(self, meters: Sequence[Meter], sources: Sequence[Callable[[], Counts]] = ()) -> None:
        """Starts showing `meters`, over the view's own counts and those of `sources`."""
        with self._lock:
            self._meters = list(meters)
            self._sources = list(sources)
            self._final = None
            self._rates = {m.key: Rate() for m in meters if m.rate and m.key}
            self._rated = [m for m in meters if m.key in self._rates]
            if self._bar is not None:
                self._bar.add_meters(self._meters)

    def add(self, key: str, n: int = 1) -> None:
        """Adds `n` to the count `key`."""
        with self._lock:
            self._local[key] += n

    def finish(self, counts: Optional[Counts] = None) -> None:
        """Ends the meters: with `counts` (the job's exact ones), shown instead of the live ones; logs a last line.

        Never raises: what a view shows cannot change how a job ends.
        """
        with self._lock:
            if counts is not None:
                self._final = dict(counts)
            if not self._meters:
                return
            if self._bar is not None:
                self._safely(self._draw, True)
            elif self.mode == LOG:
                self._safely(lambda: self._logger.info('%s', self.line().replace('progress ', 'done in ', 1)))
            self._meters = []

    def _safely(self, call, *args) -> None:
        """Calls `call`; an error of the view is logged at DEBUG, never raised into the job."""
        try:
            call(*args)
        except Exception:  # noqa: BLE001 - progress never fails a job
            self._logger.debug('progress view error', exc_info=True)

    def note(self, text: str) -> None:
        """A line said once (an engine's web UI): above the bar, or logged."""
        if self._bar is not None:
            self._bar.print(text)
        elif self.enabled:
            self._logger.info('%s', text)

    # --- what it shows ---

    def counts(self) -> dict:
        """The counts now: the final ones once given, else the view's own plus every source's."""
        with self._lock:
            if self._final is not None:
                return dict(self._final)
            merged = collections.Counter(self._local)
            for source in self._sources:
                merged.update(source())
            return dict(merged)

    def line(self) -> str:
        """The timed line of the counts now."""
        with self._lock:
            counts = self.counts()
            step = self._step
            return log_line(time.monotonic() - self._started, self._texts(counts),
                            (step.name, time.monotonic() - step.started) if step else None)

    def _texts(self, counts: Counts) -> list[tuple[str, str]]:
        texts = []
        for m in self._meters:
            try:
                text = meter_text(m, counts, self._rates[m.key].per_second() if m.key in self._rates else None)
            except Exception:  # noqa: BLE001 - a meter that cannot be shown is blank, the job goes on
                text = ''
            texts.append((m.label, text))
        return texts

    def _sample(self) -> None:
        with self._lock:
            counts, now = self.counts(), time.monotonic()
            for meter in self._rated:
                done, total, rate = counts.get(meter.key, 0), meter.total_of(counts), self._rates[meter.key]
                if total is None or done < total or rate.latest != done:  # a finished count keeps its rate
                    rate.add(now, done)

    def _draw(self, finished: bool = False) -> None:
        self._draw_on(self._bar, finished)

    def _draw_on(self, bar: '_Bar', finished: bool = False) -> None:
        with self._lock:
            counts = self.counts()
            bar.update(self._meters, counts, self._texts(counts), self._step, finished)

    def _run(self) -> None:
        next_line = time.monotonic() + self._interval
        while not self._stop.wait(TICK_SECONDS):
            self._safely(self._tick, next_line)
            if time.monotonic() >= next_line:
                next_line = time.monotonic() + self._interval

    def _tick(self, next_line: float) -> None:
        self._sample()
        bar = self._bar
        if bar is not None:
            self._draw_on(bar)
        elif time.monotonic() >= next_line and (self._meters or self._step is not None):
            self._logger.info('%s', self.line())


def duration_precise(seconds: float) -> str:
    """A step's time: `0.4 s`, `12.1 s`, then as `duration`."""
    return f'{seconds:.1f} s' if seconds < 60 else duration(seconds)


# Characters of a row's name in `bar` mode, the longest step's.
DESCRIPTION_WIDTH = 26


class _Bar:
    """The live view of `bar` mode: one rich progress row per step and meter, log lines printed above it."""

    def __init__(self, stream):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn
        from rich.table import Column

        class OptionalBar(BarColumn):
            """A bar for a meter with a total; blank for a step and a meter without one."""

            def render(self, task):
                from rich.text import Text

                if task.fields.get('bar') and task.total is not None:
                    return super().render(task)
                return Text(' ' * (self.bar_width or 0))

        self._console = Console(file=stream, force_terminal=True, highlight=False)
        self._progress = Progress(
            SpinnerColumn(finished_text='[green]✓'),
            TextColumn('{task.description}', table_column=Column(width=DESCRIPTION_WIDTH, no_wrap=True)),
            OptionalBar(bar_width=28), TextColumn('{task.fields[text]}'),
            console=self._console, refresh_per_second=1 / TICK_SECONDS, transient=False)
        self._steps: dict[int, int] = {}
        self._meters: dict[str, int] = {}
        before = sys.stderr
        self._progress.start()  # stderr now prints above the bar (rich's redirection)
        self._handlers = _log_to(sys.stderr, (before, sys.__stderr__))

    def start_step(self, step: Step) -> None:
        self._steps[id(step)] = self._progress.add_task(step.name, total=None, text=step.detail, bar=False)

    def end_step(self, step: Step) -> None:
        task = self._steps.pop(id(step))
        detail = f'{step.detail}, ' if step.detail else ''
        self._progress.update(task, total=1, completed=1, text=f'{detail}{duration_precise(step.seconds)}')

    def add_meters(self, meters: Sequence[Meter]) -> None:
        for meter in meters:
            self._meters[meter.label] = self._progress.add_task(
                meter.label, total=meter.total_of({}) or None, text='', bar=meter.key is not None)

    def update(self, meters: Sequence[Meter], counts: Counts, texts, step: Optional[Step], finished: bool) -> None:
        for meter, (_, text) in zip(meters, texts):
            done = _drawable(counts.get(meter.key, 0) if meter.key else 0) or 0
            # None keeps a total unknown: 0 would tick a row before its work started.
            total = (_drawable(meter.total_of(counts)) or None) if meter.key else None
            if finished:  # every row ticked, full: the job's counts are final
                total = done = (total or done or 1)
            self._progress.update(self._meters[meter.label], total=total, completed=done, text=text)
        if step is not None and id(step) in self._steps:
            detail = f'{step.detail}, ' if step.detail else ''
            self._progress.update(self._steps[id(step)], text=f'{detail}{duration(time.monotonic() - step.started)}')

    def print(self, text: str) -> None:
        self._progress.console.print(text, markup=False)

    def close(self) -> None:
        self._progress.stop()
        for handler, stream in self._handlers:
            handler.setStream(stream)


def _drawable(n) -> Optional[int]:
    """`n` if rich can draw it as a bar's count (a whole number a float holds), else None."""
    return n if type(n) is int and 0 <= n < 2 ** 53 else None


def _log_to(stream, streams) -> list[tuple[logging.StreamHandler, object]]:
    """Points the root logger's handlers that write to one of `streams` at `stream` (rich's proxy).

    A handler holds the stream it was made with, not `sys.stderr`: moved, its
    lines print above the bar instead of through it.

    Returns:
      The handlers moved, with the stream each had.
    """
    if stream in streams:
        return []  # not redirected (no terminal)
    return [(handler, handler.setStream(stream)) for handler in logging.getLogger().handlers
            if isinstance(handler, logging.StreamHandler) and handler.stream in streams]
