"""The DirectRunner's peak memory estimated from the listing: the figures it was fitted on, and the refusal."""

import pytest

from pipelines.build_index import direct_memory

GIB = direct_memory.GIB


# Peaks measured (docs/scale.md): input bytes, --chunk_size, mode, peak MiB of all the build's processes.
MEASURED = [
    (3_088_261, 48, 'in_memory', 1983),
    (15_430_785, 48, 'in_memory', 3348),
    (8_550_419, 400, 'in_memory', 1751),
    (25_650_225, 400, 'in_memory', 2045),
    (3_088_261, 48, 'multi_processing', 4440),
    (24_700_000, 48, 'multi_processing', 8863),
]


@pytest.mark.parametrize('size,chunk_size,mode,peak_mib', MEASURED)
def test_the_estimate_is_above_every_peak_measured_and_not_far(size, chunk_size, mode, peak_mib):
    estimate = direct_memory.estimate(size, chunk_size, 0, mode, machine_bytes=24 * GIB)
    assert 1.0 < estimate.peak_bytes / (peak_mib << 20) < 1.5


def test_overlap_and_smaller_chunks_mean_more_chunks_and_more_memory():
    plain = direct_memory.estimate(100 << 20, 400, 0, 'in_memory', machine_bytes=GIB)
    overlapping = direct_memory.estimate(100 << 20, 400, 200, 'in_memory', machine_bytes=GIB)
    small = direct_memory.estimate(100 << 20, 200, 0, 'in_memory', machine_bytes=GIB)
    assert plain.chunks < overlapping.chunks == small.chunks
    assert plain.peak_bytes < small.peak_bytes < overlapping.peak_bytes  # overlap also carries its text twice


def test_fits_leaves_the_machine_a_share():
    machine = 24 * GIB
    size = 10 << 20
    while direct_memory.estimate(size, 48, 0, 'in_memory', machine).fits:
        size *= 2
    estimate = direct_memory.estimate(size, 48, 0, 'in_memory', machine)
    assert direct_memory.USABLE_SHARE * machine < estimate.peak_bytes


def test_the_refusal_is_one_line_naming_the_estimate_the_machine_and_the_way_out():
    estimate = direct_memory.estimate(160_000_000, 48, 0, 'in_memory', machine_bytes=24 * GIB)
    line = direct_memory.refusal(estimate, 160_000_000, 250)
    assert '\n' not in line
    assert line.startswith('--input holds 160.0 MB in 250 files: about 1,666,667 chunks')
    assert f'{estimate.peak_bytes / GIB:.1f} GiB at its peak' in line and 'this machine has 24.0 GiB' in line
    assert '--runner FlinkRunner' in line and '--memory_check off' in line


def test_the_machines_memory_is_its_cgroups_limit_where_lower(monkeypatch, tmp_path):
    import builtins

    limit = tmp_path / 'memory.max'
    limit.write_text('1073741824\n')
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        if path == '/sys/fs/cgroup/memory.max':
            return real_open(limit, *args, **kwargs)
        if path == '/sys/fs/cgroup/memory/memory.limit_in_bytes':
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, 'open', fake_open)
    assert direct_memory.machine_memory() == GIB
    limit.write_text('max\n')  # cgroup v2 without a limit
    assert direct_memory.machine_memory() > GIB
