"""What a run is compared with: the previous build, or the newest readable one when it is damaged."""

import logging

import pyarrow.parquet as pq
import pytest

from pipelines.build_index.manifest import Target, change_report, previous_build
from tests.helpers import flip_pages, write_tiny_build
from transforms.output import snapshots


def damage(run):
    part = run / 'documents' / 'part-00000-of-00002.parquet'
    part.write_bytes(b'junk')
    return part


def test_a_plain_output_is_compared_with_unless_it_cannot_be_read(tmp_path, caplog):
    out = write_tiny_build(tmp_path / 'out', manifest=True)
    assert previous_build(str(out), versioned=False) == (str(out), None)
    assert previous_build(str(tmp_path / 'new'), versioned=False) == (None, None)
    part = damage(out)
    with caplog.at_level(logging.WARNING):
        assert previous_build(str(out), versioned=False) == (None, None)
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f'the previous build cannot be read, so diff.json compares with nothing: {part} is')


@pytest.fixture
def root(tmp_path):
    for run_id in ('r1', 'r2', 'r3'):
        write_tiny_build(tmp_path / 'root' / 'runs' / run_id, manifest=True)
    snapshots.write_latest(str(tmp_path / 'root'), 'r2')
    return tmp_path / 'root'


def test_a_versioned_root_is_compared_with_the_run_latest_names(root):
    assert previous_build(str(root), versioned=True) == (str(root / 'runs' / 'r2'), 'r2')


def test_a_damaged_latest_run_gives_way_to_the_newest_readable_run(root, caplog):
    part = damage(root / 'runs' / 'r2')
    damage(root / 'runs' / 'r3')
    with caplog.at_level(logging.WARNING):
        assert previous_build(str(root), versioned=True) == (str(root / 'runs' / 'r1'), 'r1')
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f'the run LATEST names cannot be read, so diff.json compares with run r1: {part} is')


@pytest.mark.parametrize('latest,problem', [
    (b'../../etc\n', 'LATEST is corrupt'), (b'r9\n', "LATEST names run 'r9', which is not a complete run")])
def test_a_bad_latest_gives_way_to_the_newest_readable_run(root, caplog, latest, problem):
    (root / 'LATEST').write_bytes(latest)
    with caplog.at_level(logging.WARNING):
        assert previous_build(str(root), versioned=True) == (str(root / 'runs' / 'r3'), 'r3')
    assert problem in caplog.text


def test_no_readable_run_compares_with_nothing(root, caplog):
    for run_id in ('r1', 'r2', 'r3'):
        damage(root / 'runs' / run_id)
    with caplog.at_level(logging.WARNING):
        assert previous_build(str(root), versioned=True) == (None, None)
    assert 'no earlier run can be read, so diff.json compares with nothing' in caplog.text


def test_the_change_report_compares_with_nothing_when_the_previous_rows_cannot_be_read(tmp_path, caplog):
    old, new = write_tiny_build(tmp_path / 'old'), write_tiny_build(tmp_path / 'new')
    target = Target('r2', str(new), str(old), 'r1')
    report = change_report(target, {'cache': None})
    assert (report['previous_run'], report['run_id'], report['cache']) == ('r1', 'r2', None)
    assert report['chunks']['unchanged'] == 1 and report['documents']['unchanged'] == 1
    [part] = [p for p in (old / 'chunks').iterdir() if pq.ParquetFile(p).metadata.num_rows]
    flip_pages(part, 'text')  # its footer is intact: `previous_build` would have taken it
    with caplog.at_level(logging.WARNING):
        report = change_report(target, {'cache': None})
    assert report['previous_run'] is None and report['chunks']['added']['ids'] == ['a#0']
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f'the previous build cannot be read, so diff.json compares with nothing: {part} is')
