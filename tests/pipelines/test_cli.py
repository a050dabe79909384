"""The `ragsieve` command: usage, sub-commands and clear errors."""

import pytest

from pipelines import cli
from pipelines.common import failures


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


@pytest.mark.parametrize('argv,line', [
    (['build', '--chunk_size', 'abc'], "ragsieve build: error: --chunk_size: invalid int value: 'abc'"),
    (['build', '--deltas', 'maybe'],
     "ragsieve build: error: --deltas: invalid choice: 'maybe' (choose from 'on', 'off')"),
    (['build', '--chunk_size', '1e9'], "ragsieve build: error: --chunk_size: invalid int value: '1e9'"),
    (['build', '--input', 'in', '--output', 'out', '--num_shards', '100000'],
     'ragsieve build: error: --num_shards must be 0 (from the input size) to 1024, got 100000'),
    (['query', '--index', 'out', '--k', 'five', 'a question'],
     "ragsieve query: error: --k: invalid int value: 'five'"),
    (['evaluate', '--output', 'out', '--k'], 'ragsieve evaluate: error: --k: expected one argument'),
])
def test_a_bad_value_is_one_line_without_the_usage(argv, line):
    import subprocess
    import sys

    from tests.helpers import REPO

    done = subprocess.run([sys.executable, '-m', 'pipelines.cli', *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    # Beam warns of a missing optional package when it is imported; nothing else is printed.
    printed = [s for s in done.stderr.splitlines() if not s.startswith('WARNING:root:apitools')]
    assert printed == [line] and not done.stdout


@pytest.mark.parametrize('setting,line', [
    ('chunk_size: null', '{config}: chunk_size has no value (null)'),
    ('config: other.yaml', '{config}: config: a config file cannot name another config file'),
])
def test_a_bad_config_value_is_one_line_naming_the_file_and_key(tmp_path, setting, line):
    import subprocess
    import sys

    from tests.helpers import REPO

    config = tmp_path / 'build.yaml'
    config.write_text(f'input: in\noutput: out\n{setting}\n')
    done = subprocess.run([sys.executable, '-m', 'pipelines.cli', 'build', '--config', str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    printed = [s for s in done.stderr.splitlines() if not s.startswith('WARNING:root:apitools')]
    assert len(printed) == 1 and printed[0].startswith('ragsieve build: error: '), done.stderr
    assert line.format(config=config) in printed[0]


def test_a_refused_publish_exits_with_its_own_status(capsys):
    from transforms.output.gates import REFUSED_EXIT_STATUS, Refused

    def refuse(argv):
        raise Refused('refused to publish:\n  gate kept_drop failed: kept chunks 1, were 9')

    assert failures.run_and_report('build', refuse, []) == REFUSED_EXIT_STATUS == 5
    assert 'ragsieve build: refused to publish:\n  gate kept_drop failed' in capsys.readouterr().err
    assert {'publish', 'report'} <= set(cli.COMMANDS)


def test_the_console_scripts_name_functions_of_this_tree():
    import importlib
    import re

    from tests.helpers import REPO

    scripts = dict(re.findall(r'^([\w-]+) = "([\w.]+:\w+)"$', (REPO / 'pyproject.toml').read_text(), re.M))
    assert scripts.keys() == {'ragsieve', 'ragsieve-sdk-worker', 'ragsieve-java'}
    for target in scripts.values():
        module, function = target.split(':')
        assert callable(getattr(importlib.import_module(module), function)), target
    assert scripts['ragsieve'] == 'pipelines.cli:main'
