"""`python -m engines start|stop`: one line and exit 2 for what it will not do; one cluster a directory; stop checks what it signals."""

import os
import signal
import subprocess
import sys

import pytest

from engines import __main__ as engines_cli
from engines import state
from tests.helpers import REPO


@pytest.fixture
def daemon():
    """A stand-in daemon that leads its own process group, as `processes.start` starts them."""
    process = subprocess.Popen(['sleep', '300'], start_new_session=True)
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def record(directory, **daemons):
    state.write(directory, {'engine': 'flink', 'ui': 'http://127.0.0.1:8081', 'build_flags': ['--runner', 'FlinkRunner'],
                            'daemons': daemons, 'logs': {}})


def run(capsys, *argv):
    """`python -m engines ARGV` in this process: (status, stderr lines)."""
    try:
        status = engines_cli.main(list(argv))
    except SystemExit as e:  # argparse's errors
        status = e.code
    return status, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize('size, says', [('-1', "argument --size: -1: a cluster needs at least 1"),
                                        ('0', "argument --size: 0: a cluster needs at least 1"),
                                        ('two', "argument --size: 'two' is not a whole number")])
def test_a_size_below_one_is_refused_at_once(tmp_path, capsys, monkeypatch, size, says):
    started = []

    def start(*args):
        started.append(args)
        raise AssertionError('a cluster was started')

    monkeypatch.setattr(engines_cli, 'start', start)
    assert run(capsys, 'start', 'spark', '--dir', str(tmp_path), '--size', size) == (
        2, [f'python -m engines start: error: {says}'])
    assert not started  # refused by the flag's check, before anything starts
    assert not (tmp_path / state.STATE_FILE).exists()


def test_a_dir_that_is_a_file_or_under_one_is_one_line(tmp_path, capsys):
    (tmp_path / 'file').write_text('x')
    assert run(capsys, 'start', 'flink', '--dir', str(tmp_path / 'file')) == (
        2, [f'python -m engines start: error: --dir {tmp_path / "file"}: a file, not a directory'])
    status, err = run(capsys, 'start', 'flink', '--dir', str(tmp_path / 'file' / 'sub'))
    assert status == 2 and len(err) == 1 and 'cannot be made: Not a directory' in err[0]
    status, err = run(capsys, 'stop', '--dir', str(tmp_path / 'file'))
    assert status == 2 and len(err) == 1 and 'no cluster recorded there' in err[0]


@pytest.mark.skipif(os.geteuid() == 0, reason='root writes any directory')
def test_a_read_only_dir_is_one_line(tmp_path, capsys):
    tmp_path.chmod(0o555)
    try:
        assert run(capsys, 'start', 'flink', '--dir', str(tmp_path)) == (
            2, [f'python -m engines start: error: --dir {tmp_path}: not writable by this user'])
    finally:
        tmp_path.chmod(0o755)


def test_a_corrupt_cluster_json_is_one_line_for_start_and_stop(tmp_path, capsys):
    (tmp_path / state.STATE_FILE).write_text('{"engine": "flink", "pids"')
    for argv in (['start', 'flink', '--dir', str(tmp_path)], ['stop', '--dir', str(tmp_path)]):
        status, err = run(capsys, *argv)
        assert status == 2 and len(err) == 1, err
        assert f'{tmp_path / state.STATE_FILE} is not the state of a cluster' in err[0]


def test_a_second_start_on_a_running_cluster_refuses_naming_it(tmp_path, capsys, daemon):
    record(tmp_path, jobmanager=state.identity(daemon.pid))
    status, err = run(capsys, 'start', 'spark', '--dir', str(tmp_path))
    assert status == 2 and len(err) == 1
    assert (f'--dir {tmp_path} holds a running cluster, flink (http://127.0.0.1:8081; jobmanager {daemon.pid}): '
            f'use it') in err[0] and f'python -m engines stop --dir {tmp_path}' in err[0]
    assert daemon.poll() is None and state.read(tmp_path)['engine'] == 'flink'


def test_stop_signals_the_recorded_daemon_and_never_a_process_that_took_a_stale_pid(tmp_path, capsys, daemon,
                                                                                    monkeypatch):
    stranger = subprocess.Popen(['sleep', '301'], start_new_session=True)
    signalled = []

    def signal_group(pid, sig, real=engines_cli.signal_group):
        signalled.append(pid)
        real(pid, sig)

    monkeypatch.setattr(engines_cli, 'signal_group', signal_group)
    try:
        # The stranger holds the PID recorded for a daemon that exited: a different start time.
        taken = dict(state.identity(stranger.pid), start=state.identity(stranger.pid)['start'] - 1)
        record(tmp_path, jobmanager=state.identity(daemon.pid), **{'taskmanager-0': taken})
        # A grace no loaded machine outlasts: SIGTERM, not SIGKILL, ends the daemon.
        assert engines_cli.stop(tmp_path, grace=120) == ['jobmanager']
        assert daemon.wait(timeout=120) == -signal.SIGTERM
        assert stranger.pid not in signalled and stranger.poll() is None
        assert not (tmp_path / state.STATE_FILE).exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_stop_kills_a_daemon_that_ignores_sigterm_after_the_grace(tmp_path, daemon):
    stubborn = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, '
                                 'signal.SIG_IGN); print(1, flush=True); time.sleep(300)'],
                                start_new_session=True, stdout=subprocess.PIPE)
    stubborn.stdout.readline()  # its handler is set
    record(tmp_path, jobmanager=state.identity(stubborn.pid))
    assert engines_cli.stop(tmp_path, grace=1) == ['jobmanager']
    assert stubborn.wait(timeout=120) == -signal.SIGKILL


def test_the_module_runs_as_a_command(tmp_path):
    done = subprocess.run([sys.executable, '-m', 'engines', 'start', 'flink', '--dir', str(tmp_path), '--size', '0'],
                          cwd=REPO, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (
        2, 'python -m engines start: error: argument --size: 0: a cluster needs at least 1\n')
