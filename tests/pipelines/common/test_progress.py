"""The progress view: modes, rates and ETA, the timed lines of `log`, the rows of `bar`."""

import io
import logging
import re
import time

import pytest

from pipelines.common import progress
from pipelines.common.progress import Meter


class Terminal(io.StringIO):
    def isatty(self):
        return True


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


def test_a_rate_starts_when_the_count_moves_and_covers_its_window():
    rate = progress.Rate(window=10)
    for t in (0, 5, 9):  # idle before the work starts: not part of the rate
        rate.add(t, 0)
    assert rate.per_second() is None
    rate.add(10, 20)
    assert rate.per_second() == 20
    rate.add(30, 60)  # the window keeps the samples of the last 10 s, and the one before them
    rate.add(35, 100)
    assert rate.per_second() == pytest.approx((100 - 20) / (35 - 10))
    rate.add(40, 100)
    assert rate.per_second() == pytest.approx((100 - 60) / (40 - 30))
    rate.add(50, 100)
    assert rate.per_second() is None  # stalled for a whole window: no rate, no ETA


def test_durations_and_sizes():
    assert [progress.duration(s) for s in (0.4, 42, 184, 3725)] == ['0s', '42s', '3m04s', '1h02m']
    assert [progress.size(n) for n in (512, 12_300, 4_500_000, 1.2e9)] == ['512 B', '12.3 kB', '4.5 MB', '1.2 GB']


def test_a_meter_shows_its_count_total_rate_eta_and_note():
    embed = Meter('embed', 'e', 'chunks', total=lambda c: c['c'] - 2, rate=True, note=lambda c: 'cached 3')
    assert progress.meter_text(embed, {'e': 2048, 'c': 4802}, 42.66) == (
        '2,048/4,800 chunks, 42.7 chunks/s, ETA 1m05s, cached 3')
    assert progress.meter_text(embed, {'e': 4800, 'c': 4802}, 40) == '4,800/4,800 chunks, 40.0 chunks/s, cached 3'
    assert progress.meter_text(Meter('chunk', 'c', 'chunks'), {}) == '0 chunks'
    assert progress.meter_text(Meter('filter', note=lambda c: 'kept 3'), {}) == 'kept 3'
    assert progress.log_line(95, [('read', '3/6 files'), ('chunk', '')], ('load', 3)) == (
        'progress 1m35s: load (running 3s); read 3/6 files')


def test_log_mode_logs_each_step_and_a_line_every_interval(caplog):
    logger = logging.getLogger('ragsieve.test_progress')
    caplog.set_level(logging.INFO, logger=logger.name)
    with progress.View('log', 0.5, logger) as view:
        with view.step('list input') as step:
            step.detail = '6 files, 10.8 kB'
        view.show([Meter('read', 'files', 'files', total=6)], [lambda: {'files': 2}])
        for _ in range(4):
            view.add('files')
            time.sleep(0.5)
        view.finish({'files': 6})
    lines = [r.getMessage() for r in caplog.records]
    assert re.fullmatch(r'list input \(6 files, 10\.8 kB\): 0\.\d s', lines[0])
    shown = [int(n) for line in lines for n in re.findall(r'^progress \d+s: read (\d)/6 files$', line)]
    assert len(shown) >= 2 and shown == sorted(shown) and shown[-1] > 2  # own counts plus the source's
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
            for _ in range(3):
                view.add('e', 2)
                time.sleep(0.6)
            logging.getLogger('ragsieve.test_progress').warning('a line above the bar')
            view.finish({'e': 10})
        assert handler.stream is terminal  # given back
    finally:
        root.removeHandler(handler)
    screen = re.sub(r'\x1b\[[0-9;?]*[A-Za-z]', '', terminal.getvalue())
    # A loaded machine may draw late: the step's time and which counts were drawn between the adds vary.
    assert re.search(r'✓ load embedding model +all-MiniLM-L6-v2, \d+\.\d s', screen)
    drawn = {int(n) for n in re.findall(r'embed .*?(\d+)/10 chunks', screen)}
    assert 10 in drawn and drawn & {2, 4, 6}, drawn
    assert 'a line above the bar' in screen


def test_a_rate_and_an_eta_of_any_counts_never_raise():
    rate = progress.Rate()
    rate.add(0.0, 0)
    rate.add(1.0, 10 ** 400)  # a float cannot hold it
    assert rate.per_second() is None
    assert progress.duration(float('inf')) == '?' and progress.duration(float('nan')) == '?'
    meter = Meter('embed', 'e', 'chunks', total=10 ** 400, rate=True)
    assert progress.meter_text(meter, {'e': 1}, 1e-300).startswith('1/')


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
