"""What a progress view shows: a count's rate, durations and sizes, a meter's text and the timed line."""

import pytest

from pipelines.common import progress_meters
from pipelines.common.progress_meters import Meter


def test_a_rate_starts_when_the_count_moves_and_covers_its_window():
    rate = progress_meters.Rate(window=10)
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
    assert [progress_meters.duration(s) for s in (0.4, 42, 184, 3725)] == ['0s', '42s', '3m04s', '1h02m']
    assert [progress_meters.size(n) for n in (512, 12_300, 4_500_000, 1.2e9)] == ['512 B', '12.3 kB', '4.5 MB', '1.2 GB']


def test_a_meter_shows_its_count_total_rate_eta_and_note():
    embed = Meter('embed', 'e', 'chunks', total=lambda c: c['c'] - 2, rate=True, note=lambda c: 'cached 3')
    assert progress_meters.meter_text(embed, {'e': 2048, 'c': 4802}, 42.66) == (
        '2,048/4,800 chunks, 42.7 chunks/s, ETA 1m05s, cached 3')
    assert progress_meters.meter_text(embed, {'e': 4800, 'c': 4802}, 40) == '4,800/4,800 chunks, 40.0 chunks/s, cached 3'
    assert progress_meters.meter_text(Meter('chunk', 'c', 'chunks'), {}) == '0 chunks'
    assert progress_meters.meter_text(Meter('filter', note=lambda c: 'kept 3'), {}) == 'kept 3'
    assert progress_meters.log_line(95, [('read', '3/6 files'), ('chunk', '')], ('load', 3)) == (
        'progress 1m35s: load (running 3s); read 3/6 files')


def test_a_rate_and_an_eta_of_any_counts_never_raise():
    rate = progress_meters.Rate()
    rate.add(0.0, 0)
    rate.add(1.0, 10 ** 400)  # a float cannot hold it
    assert rate.per_second() is None
    assert progress_meters.duration(float('inf')) == '?' and progress_meters.duration(float('nan')) == '?'
    meter = Meter('embed', 'e', 'chunks', total=10 ** 400, rate=True)
    assert progress_meters.meter_text(meter, {'e': 1}, 1e-300).startswith('1/')
