"""The progress view: modes, rates and ETA, the timed lines of `log`, the rows of `bar`."""

import io
import logging
import re
import time

import pytest

from pipelines.common import progress
from pipelines.common.progress_meters import Meter


class Terminal(io.StringIO):
    def isatty(self):
        return True


def until(predicate, seconds: float = 60.0) -> bool:
    """Polls `predicate` until it holds or `seconds` pass (the view draws on its own thread); returns it."""
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def logged_counts(caplog) -> list[int]:
    """The files counted by each timed line of `log` mode so far."""
    return [int(n) for r in list(caplog.records) for n in re.findall(r'^progress \d+s: read (\d)/6 files$',
                                                                    r.getMessage())]


def drawn_counts(terminal) -> set[int]:
    """The chunks counted by the embed row in every frame drawn so far."""
    screen = re.sub(r'\x1b\[[0-9;?]*[A-Za-z]', '', terminal.getvalue())
    return {int(n) for n in re.findall(r'embed .*?(\d+)/10 chunks', screen)}


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere():
    assert progress.resolve_mode('auto', Terminal()) == progress.BAR
    assert progress.resolve_mode('auto', io.StringIO()) == progress.LOG
    assert progress.resolve_mode('none', Terminal()) == progress.NONE
    with pytest.raises(ValueError, match='--progress must be one of'):
        progress.resolve_mode('fancy')


@pytest.mark.parametrize('seconds', [0, -1, float('inf'), float('nan')])
def test_an_interval_is_a_finite_number_of_seconds(seconds):
    with pytest.raises(ValueError, match='--progress_interval'):
        progress.check_interval(seconds)


def test_log_mode_logs_each_step_and_a_line_every_interval(caplog):
    logger = logging.getLogger('ragsieve.test_progress')
    caplog.set_level(logging.INFO, logger=logger.name)
    with progress.View('log', 0.5, logger) as view:
        with view.step('list input') as step:
            step.detail = '6 files, 10.8 kB'
        view.show([Meter('read', 'files', 'files', total=6)], [lambda: {'files': 2}])
        for files in range(3, 7):  # own counts plus the source's
            view.add('files')
            assert until(lambda shown=files: shown in logged_counts(caplog)), logged_counts(caplog)
        view.finish({'files': 6})
    lines = [r.getMessage() for r in caplog.records]
    (step,) = [line for line in lines if line.startswith('list input')]  # a timed line may come first
    assert re.fullmatch(r'list input \(6 files, 10\.8 kB\): \d+\.\d s', step)
    shown = logged_counts(caplog)  # a line may come between show and the first add: 2
    assert shown == sorted(shown) and {3, 4, 5, 6} <= set(shown) <= {2, 3, 4, 5, 6}
    assert lines[-1].startswith('done in ') and lines[-1].endswith('read 6/6 files')


def test_none_mode_shows_nothing(caplog):
    caplog.set_level(logging.INFO)
    with progress.View('none') as view:
        with view.step('list input'):
            pass
        view.show([Meter('read', 'files', 'files')])
        view.add('files')
        view.note('Flink web UI: http://localhost:8081')
        view.finish()
    assert not caplog.records


def test_bar_mode_draws_the_steps_and_meters_and_prints_log_lines_above_them():
    terminal = Terminal()
    handler = logging.StreamHandler(terminal)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with progress.View('bar', stream=terminal) as view:
            with view.step('load embedding model', 'all-MiniLM-L6-v2'):
                time.sleep(0.6)
            view.show([Meter('embed', 'e', 'chunks', total=10, rate=True)])
            for chunks in (2, 4, 6):
                view.add('e', 2)
                assert until(lambda shown=chunks: shown in drawn_counts(terminal)), drawn_counts(terminal)
            logging.getLogger('ragsieve.test_progress').warning('a line above the bar')
            view.finish({'e': 10})
        assert handler.stream is terminal  # given back
    finally:
        root.removeHandler(handler)
    screen = re.sub(r'\x1b\[[0-9;?]*[A-Za-z]', '', terminal.getvalue())
    assert re.search(r'✓ load embedding model +all-MiniLM-L6-v2, \d+\.\d s', screen)  # a loaded machine's time
    assert {2, 4, 6, 10} <= drawn_counts(terminal) <= {0, 2, 4, 6, 10}  # 0: a frame between show and the first add
    assert 'a line above the bar' in screen


@pytest.mark.parametrize('mode', ['log', 'bar'])
def test_a_view_shown_absurd_counts_finishes_without_an_error(mode):
    terminal = Terminal()
    with progress.View(mode, 0.1, stream=terminal) as view:
        view.show([Meter('embed', 'e', 'chunks', total=lambda c: c.get('t'), rate=True,
                         note=lambda c: 1 / 0)])  # a note that fails
        for value in (0, 10 ** 400, -5, 10 ** 12):
            view.add('e', value)
            time.sleep(0.3)
        view.finish({'e': 10 ** 400, 't': 1})
    if mode == 'bar':
        assert '\x1b[?25h' in terminal.getvalue()  # the cursor shown again
