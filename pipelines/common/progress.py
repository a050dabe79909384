"""How a job says how far it is: a live view on a terminal, a timed line in a log, or nothing.

A `View` shows the job's named steps with their times, then its meters: a
count, its total when one is known, its rate and ETA when asked. The job
adds to the counts itself (`View.add`) or hands the view sources of counts
other processes made (`build_index.progress.Listener`). `--progress auto`
draws it with rich on a terminal (stderr, `progress_bar.Bar`) and logs one
line every `--progress_interval` seconds elsewhere (cron, Airflow, CI). The
meters, steps and rates it shows, and their text, are progress_meters.py.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import sys
import threading
import time
from typing import Callable, Iterator, Optional, Sequence

from pipelines.common.progress_bar import Bar
from pipelines.common.progress_meters import Counts, Meter, Rate, Step, duration_precise, log_line, meter_text

AUTO, BAR, LOG, NONE = 'auto', 'bar', 'log', 'none'
MODES = (AUTO, BAR, LOG, NONE)
DEFAULT_INTERVAL = 30.0
# How often the view samples the counts (and redraws the bar).
TICK_SECONDS = 0.5


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
            self._bar = Bar(self._stream, TICK_SECONDS)
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

    def where(self) -> str:
        """The meters' figures now, as the timed line shows them without its time: where a job stands."""
        with self._lock:
            shown = [f'{label} {text}' for label, text in self._texts(self.counts()) if text]
        return '; '.join(shown) or 'nothing counted yet'

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

    def _draw_on(self, bar: Bar, finished: bool = False) -> None:
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
