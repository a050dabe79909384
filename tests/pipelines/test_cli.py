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


# --- how failures are reported -------------------------------------------------------


class Raise:
    """A step that fails on its element (the subject is Beam's wrapping of errors, not a model)."""

    def __init__(self, error):
        self.error = error

    def __call__(self, element):
        raise self.error


def beam_failure(error):
    """The exception a DirectRunner pipeline raises when one of its steps raises `error`."""
    import apache_beam as beam

    try:
        with beam.Pipeline() as p:
            _ = p | 'Create' >> beam.Create([1]) | 'FailingStep' >> beam.Map(Raise(error))
    except BaseException as e:
        return e
    raise AssertionError('the pipeline did not fail')


def test_errors_raised_inside_a_pipeline_are_one_line_without_the_step():
    import errno

    from transforms.storage import WriteError

    wrapped = beam_failure(OSError(errno.ENOSPC, 'No space left on device'))
    assert isinstance(wrapped, RuntimeError)  # Beam cannot rebuild an OSError with its step appended
    assert cli.reported_error(wrapped) == '[Errno 28] No space left on device'
    wrapped = beam_failure(WriteError('cannot write /out/chunks/part-0.parquet: No space left on device'))
    assert "while running 'FailingStep'" in str(wrapped)
    assert cli.reported_error(wrapped) == 'cannot write /out/chunks/part-0.parquet: No space left on device'
    assert cli.reported_error(beam_failure(ValueError('bad value\nsecond line'))) == 'bad value second line'
    assert cli.reported_error(beam_failure(KeyError('a bug'))) is None


def test_os_errors_name_their_paths():
    import errno

    assert cli.reported_error(PermissionError(errno.EACCES, 'Permission denied', '/out/.lock')) == (
        '/out/.lock: Permission denied')
    assert cli.reported_error(OSError(errno.EXDEV, 'Invalid cross-device link', '/a', None, '/b')) == (
        '/a -> /b: Invalid cross-device link')


def test_an_error_of_a_worker_in_another_process_is_read_from_its_traceback():
    text = ('Error processing instruction 7. Original traceback is\nTraceback (most recent call last):\n'
            '  File "x.py", line 1, in f\nValueError: cannot train a \'IVF4096,Flat\' index on 8 vectors '
            "[while running 'WriteIndex/BuildIndexes/BuildFaissIndex']\n")
    assert cli.reported_error(RuntimeError(text)) == "cannot train a 'IVF4096,Flat' index on 8 vectors"
    bug = text.replace('ValueError', 'ZeroDivisionError')
    assert cli.reported_error(RuntimeError(bug)) is None
    assert cli.reported_error(RuntimeError('no traceback in here')) is None


def test_a_reported_error_is_one_line_and_exit_2_and_beam_logs_no_traceback(capsys, caplog):
    def run(argv):
        import apache_beam as beam

        with beam.Pipeline() as p:
            _ = p | 'Create' >> beam.Create([1]) | 'FailingStep' >> beam.Map(Raise(ValueError('the value was bad')))

    assert cli.run_and_report('build', run, []) == cli.FAILED
    assert capsys.readouterr().err == 'ragsieve build: error: the value was bad\n'
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


def test_a_job_the_engine_failed_is_one_line_and_its_own_status(capsys):
    # As Beam's PortableRunner raises it when Flink fails the job (the engine's Java error, its trace after).
    failed = RuntimeError('Pipeline BeamApp-root-1201-a1_4463 failed in state FAILED: org.apache.flink.runtime.'
                          'jobmaster.JobMasterException: TaskManager with id tm-0 is no longer reachable.\n\tat org.'
                          'apache.flink.runtime.jobmaster.JobMaster.disconnectTaskManager(JobMaster.java:1)\n')

    def run(argv):
        raise failed

    assert cli.run_and_report('build', run, []) == cli.JOB_FAILED == 6
    assert capsys.readouterr().err == (
        'ragsieve build: error: the engine ended job BeamApp-root-1201-a1_4463 FAILED: org.apache.flink.runtime.'
        'jobmaster.JobMasterException: TaskManager with id tm-0 is no longer reachable.; nothing was published\n')
    # A ragsieve error raised in a worker of that job is still reported as itself (exit 2).
    worker = RuntimeError('Pipeline j failed in state FAILED: java.lang.RuntimeException: Error received from SDK '
                          'harness: Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad input\n')
    assert cli.reported_error(worker) == 'bad input' and cli.failed_job_line(worker) is not None


def test_an_unexpected_error_keeps_its_traceback():
    def run(argv):
        raise KeyError('a bug')

    with pytest.raises(KeyError):
        cli.run_and_report('build', run, [])


def test_interrupted(capsys):
    def run(argv):
        raise KeyboardInterrupt

    assert cli.run_and_report('query', run, []) == cli.INTERRUPTED
    assert capsys.readouterr().err == 'ragsieve query: interrupted\n'


def test_the_traceback_of_a_reported_error_on_request(capsys, monkeypatch):
    monkeypatch.setenv(cli.TRACEBACK_ENV, '1')

    def run(argv):
        raise ValueError('the value was bad')

    assert cli.run_and_report('build', run, []) == cli.FAILED
    err = capsys.readouterr().err
    assert 'Traceback (most recent call last)' in err and err.endswith('ragsieve build: error: the value was bad\n')


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


def test_every_exit_status_is_documented_in_the_readme_and_docs():
    from pipelines import reference

    assert set(cli.EXIT_CODES) == {cli.OK, cli.UNEXPECTED, cli.FAILED, cli.DRIFT, cli.SYNC_FAILED, cli.REFUSED,
                                   cli.JOB_FAILED, cli.INTERRUPTED, cli.TERMINATED}
    table = cli.exit_codes_table()
    for page in ('README.md', 'docs/cli.md'):
        with open(f'{reference.DOCS}/../{page}', encoding='utf-8') as f:
            assert table in f.read(), page


def test_a_refused_publish_exits_with_its_own_status(capsys):
    from transforms.output.gates import REFUSED_EXIT_STATUS, Refused

    def refuse(argv):
        raise Refused('refused to publish:\n  gate kept_drop failed: kept chunks 1, were 9')

    assert cli.run_and_report('build', refuse, []) == REFUSED_EXIT_STATUS == 5
    assert 'ragsieve build: refused to publish:\n  gate kept_drop failed' in capsys.readouterr().err
    assert {'publish', 'report'} <= set(cli.COMMANDS)


def interrupt_self(element):
    """A step that gets the signal its process is sent, as a user's Ctrl-C reaches one."""
    import os
    import signal
    import time

    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)  # the handler raises here
    return element


def test_ctrl_c_inside_a_beam_step_is_exit_130_in_one_line(capsys, caplog):
    import apache_beam as beam

    def run(argv):
        with beam.Pipeline(runner='DirectRunner') as p:
            _ = p | beam.Create([1]) | 'Interrupted' >> beam.Map(interrupt_self)

    assert cli.run_and_report('build', run, []) == cli.INTERRUPTED  # Beam raised RuntimeError: KeyboardInterrupt
    assert capsys.readouterr().err == 'ragsieve build: interrupted\n'
    assert 'Traceback' not in caplog.text


@pytest.mark.parametrize('name,status,word', [('SIGINT', 130, 'interrupted'), ('SIGTERM', 143, 'terminated')])
def test_a_stop_signal_is_its_documented_status_and_the_handlers_are_restored(capsys, name, status, word):
    import os
    import signal

    before = signal.getsignal(getattr(signal, name))

    def run(argv):
        os.kill(os.getpid(), getattr(signal, name))
        raise AssertionError('not reached: the handler raises first')

    assert cli.run_and_report('sync', run, []) == status
    assert capsys.readouterr().err == f'ragsieve sync: {word}\n'
    assert signal.getsignal(getattr(signal, name)) is before
