"""The live view of `--progress bar`: one rich progress row per step and meter, log lines printed above it."""

from __future__ import annotations

import logging
import sys
import time
from typing import Optional, Sequence

from pipelines.common.progress_meters import Counts, Meter, Step, duration, duration_precise

# Characters of a row's name in `bar` mode, the longest step's.
DESCRIPTION_WIDTH = 26


class Bar:
    """The live view of `bar` mode: one rich progress row per step and meter, log lines printed above it."""

    def __init__(self, stream, tick_seconds: float):
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
            console=self._console, refresh_per_second=1 / tick_seconds, transient=False)
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
