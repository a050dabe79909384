"""The `ragsieve` command: usage, sub-commands and clear errors."""

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
