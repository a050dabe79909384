"""The `ragsieve` command: usage, sub-commands and clear errors."""

import pytest

from pipelines import cli


def test_no_arguments_prints_usage_and_fails(capsys):
    assert cli.main([]) == 2
    assert 'usage: ragsieve' in capsys.readouterr().out


def test_help(capsys):
    assert cli.main(['--help']) == 0
    assert 'build' in capsys.readouterr().out


def test_unknown_command(capsys):
    assert cli.main(['frobnicate']) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_build_without_input_is_a_clear_error(tmp_path, capsys):
    assert cli.main(['build', '--output', str(tmp_path / 'out')]) == 2
    assert '--input is required' in capsys.readouterr().err


def test_build_with_bad_input_is_a_clear_error(tmp_path, capsys):
    assert cli.main(['build', '--input', str(tmp_path / 'none*.md'), '--output', str(tmp_path / 'out')]) == 2
    assert 'matches no file' in capsys.readouterr().err


@pytest.mark.parametrize('module,command', [
    ('pipelines.build_index', 'build'), ('pipelines.evaluate', 'evaluate'), ('pipelines.query', 'query'),
])
def test_python_dash_m_entry_points_report_errors_cleanly(tmp_path, module, command):
    # As a subprocess: `python -m` runs the module as __main__, which must not
    # import it a second time (Beam would see its options registered twice).
    import subprocess
    import sys

    argv = {'build': ['--output', str(tmp_path / 'out')],
            'evaluate': ['--output', str(tmp_path / 'out'), '--chunkers', 'fixed:10:10'],
            'query': ['--index', str(tmp_path / 'missing'), 'a question']}[command]
    done = subprocess.run([sys.executable, '-m', module, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f'ragsieve {command}: error:' in done.stderr


def test_a_refused_publish_exits_with_its_own_status(capsys):
    from transforms.output.gates import REFUSED_EXIT_STATUS, Refused

    def refuse(argv):
        raise Refused('refused to publish:\n  gate kept_drop failed: kept chunks 1, were 9')

    assert cli.run_and_report('build', refuse, []) == REFUSED_EXIT_STATUS == 5
    assert 'ragsieve build: refused to publish:\n  gate kept_drop failed' in capsys.readouterr().err
    assert {'publish', 'report'} <= set(cli.COMMANDS)
