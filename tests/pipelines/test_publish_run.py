"""`ragsieve publish`: which runs it publishes, and the clear errors of the others."""

import shutil

from pipelines import cli
from transforms.output import snapshots


def test_any_complete_run_can_be_published_a_rollback_too(sample_root, tmp_path, capsys):
    root = tmp_path / 'root'
    shutil.copytree(sample_root[1], root)
    shutil.copytree(root / 'runs' / 'r1', root / 'runs' / 'r0')
    assert cli.main(['publish', '--output', str(root), '--run', 'r0']) == 0
    assert snapshots.read_latest(str(root)) == 'r0'
    assert 'LATEST names r0 (was r1); its gates passed' in capsys.readouterr().out


def test_what_cannot_be_published_is_a_clear_error(sample_root, tmp_path, capsys):
    root = tmp_path / 'root'
    shutil.copytree(sample_root[1], root)
    (root / 'runs' / 'half').mkdir()  # a killed run: no manifest
    cases = [
        (['--output', str(root)], 'is a versioned root: name the run to publish with --run RUN_ID'),
        (['--output', str(root), '--run', 'half'], 'is not a complete run (complete runs: r1)'),
        (['--output', str(root), '--run', '../x'], "error: --run '../x' must be letters"),  # the flag it came from
        (['--output', str(tmp_path / 'plain')], 'plain.refused holds no refused build to publish'),
    ]
    for argv, message in cases:
        assert cli.main(['publish', *argv]) == 2, argv
        assert message in capsys.readouterr().err
    assert snapshots.read_latest(str(root)) == 'r1'


def test_a_build_holding_the_root_blocks_publishing(sample_root, tmp_path, capsys):
    root = tmp_path / 'root'
    shutil.copytree(sample_root[1], root)
    with snapshots.lock(str(root)):
        assert cli.main(['publish', '--output', str(root), '--run', 'r1']) == 2
    assert 'another ragsieve build is writing' in capsys.readouterr().err
