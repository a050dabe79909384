"""How a command's failures reach the user: one line each, and the status EXIT_CODES documents."""

import subprocess
import sys

import pytest

from pipelines.common import exits, failures


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
    assert failures.reported_error(wrapped) == '[Errno 28] No space left on device'
    wrapped = beam_failure(WriteError('cannot write /out/chunks/part-0.parquet: No space left on device'))
    assert "while running 'FailingStep'" in str(wrapped)
    assert failures.reported_error(wrapped) == 'cannot write /out/chunks/part-0.parquet: No space left on device'
    assert failures.reported_error(beam_failure(ValueError('bad value\nsecond line'))) == 'bad value second line'
    assert failures.reported_error(beam_failure(KeyError('a bug'))) is None


def test_os_errors_name_their_paths():
    import errno

    assert failures.reported_error(PermissionError(errno.EACCES, 'Permission denied', '/out/.lock')) == (
        '/out/.lock: Permission denied')
    assert failures.reported_error(OSError(errno.EXDEV, 'Invalid cross-device link', '/a', None, '/b')) == (
        '/a -> /b: Invalid cross-device link')


def test_an_error_of_a_worker_in_another_process_is_read_from_its_traceback():
    text = ('Error processing instruction 7. Original traceback is\nTraceback (most recent call last):\n'
            '  File "x.py", line 1, in f\nValueError: cannot train a \'IVF4096,Flat\' index on 8 vectors '
            "[while running 'WriteIndex/BuildIndexes/BuildFaissIndex']\n")
    assert failures.reported_error(RuntimeError(text)) == "cannot train a 'IVF4096,Flat' index on 8 vectors"
    bug = text.replace('ValueError', 'ZeroDivisionError')
    assert failures.reported_error(RuntimeError(bug)) is None
    assert failures.reported_error(RuntimeError('no traceback in here')) is None


def test_a_reported_error_is_one_line_and_exit_2_and_beam_logs_no_traceback(capsys, caplog):
    def run(argv):
        import apache_beam as beam

        with beam.Pipeline() as p:
            _ = p | 'Create' >> beam.Create([1]) | 'FailingStep' >> beam.Map(Raise(ValueError('the value was bad')))

    assert failures.run_and_report('build', run, []) == exits.FAILED
    assert capsys.readouterr().err == 'ragsieve build: error: the value was bad\n'
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


def test_a_job_the_engine_failed_is_one_line_and_its_own_status(capsys):
    # As Beam's PortableRunner raises it when Flink fails the job (the engine's Java error, its trace after).
    failed = RuntimeError('Pipeline BeamApp-root-1201-a1_4463 failed in state FAILED: org.apache.flink.runtime.'
                          'jobmaster.JobMasterException: TaskManager with id tm-0 is no longer reachable.\n\tat org.'
                          'apache.flink.runtime.jobmaster.JobMaster.disconnectTaskManager(JobMaster.java:1)\n')

    def run(argv):
        raise failed

    assert failures.run_and_report('build', run, []) == exits.JOB_FAILED == 6
    assert capsys.readouterr().err == (
        'ragsieve build: error: the engine ended job BeamApp-root-1201-a1_4463 FAILED: org.apache.flink.runtime.'
        'jobmaster.JobMasterException: TaskManager with id tm-0 is no longer reachable.; nothing was published\n')
    # A ragsieve error raised in a worker of that job is still reported as itself (exit 2).
    worker = RuntimeError('Pipeline j failed in state FAILED: java.lang.RuntimeException: Error received from SDK '
                          'harness: Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad input\n')
    assert failures.reported_error(worker) == 'bad input' and failures.failed_job_line(worker) is not None


def test_an_unexpected_error_keeps_its_traceback():
    def run(argv):
        raise KeyError('a bug')

    with pytest.raises(KeyError):
        failures.run_and_report('build', run, [])


def test_interrupted(capsys):
    def run(argv):
        raise KeyboardInterrupt

    assert failures.run_and_report('query', run, []) == exits.INTERRUPTED
    assert capsys.readouterr().err == 'ragsieve query: interrupted\n'


def test_the_traceback_of_a_reported_error_on_request(capsys, monkeypatch):
    monkeypatch.setenv(failures.TRACEBACK_ENV, '1')

    def run(argv):
        raise ValueError('the value was bad')

    assert failures.run_and_report('build', run, []) == exits.FAILED
    err = capsys.readouterr().err
    assert 'Traceback (most recent call last)' in err and err.endswith('ragsieve build: error: the value was bad\n')


# Each signal test in a process of its own. Sent to the test's own process, a signal reached it once outside the
# command's handlers (delivered to another of the worker's many threads and handled late, a SIGTERM then on its
# default action): the pytest worker ended, and xdist's loadfile scheduling then waited forever for its tests.
CTRL_C_CHILD = """
import os, signal, sys, time
import apache_beam as beam
from pipelines.common import failures

def interrupt_self(element):  # a step that gets the signal its process is sent, as a user's Ctrl-C reaches one
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)  # the handler raises here
    return element

def run(argv):
    with beam.Pipeline(runner='DirectRunner') as p:
        _ = p | beam.Create([1]) | 'Interrupted' >> beam.Map(interrupt_self)

sys.exit(failures.run_and_report('build', run, []))
"""

STOP_CHILD = """
import os, signal, sys
from pipelines.common import failures

number = getattr(signal, sys.argv[1])
before = signal.getsignal(number)

def run(argv):
    os.kill(os.getpid(), number)
    signal.pause()  # the handler raises here, however late the signal is handled
    raise AssertionError('not reached: the handler raises first')

status = failures.run_and_report('sync', run, [])
print(status, signal.getsignal(number) is before)
"""


def signalled(child: str, *args: str) -> subprocess.CompletedProcess:
    from tests.helpers import REPO

    return subprocess.run([sys.executable, '-c', child, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_ctrl_c_inside_a_beam_step_is_exit_130_in_one_line():
    done = signalled(CTRL_C_CHILD)
    assert done.returncode == exits.INTERRUPTED, done.stderr[-3000:]  # Beam raised RuntimeError: KeyboardInterrupt
    assert done.stderr == 'ragsieve build: interrupted\n', done.stderr[-3000:]


@pytest.mark.parametrize('name,status,word', [('SIGINT', 130, 'interrupted'), ('SIGTERM', 143, 'terminated')])
def test_a_stop_signal_is_its_documented_status_and_the_handlers_are_restored(name, status, word):
    done = signalled(STOP_CHILD, name)
    assert done.returncode == 0 and done.stdout.split() == [str(status), 'True'], done.stderr[-3000:]
    assert done.stderr == f'ragsieve sync: {word}\n'


def test_a_stores_refusal_however_beam_wrapped_it_is_one_line(proxied_store, monkeypatch):
    from tests.helpers import BUCKET, GCS_FORBIDDEN
    from transforms import storage

    url, proxy = proxied_store
    if url.startswith('s3://'):  # credentials MinIO does not know
        monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'nobody')
        storage.configure()
    else:
        proxy.refuse('*', f'/b/{BUCKET}/', 403, GCS_FORBIDDEN)
    with pytest.raises(OSError) as listing:  # Beam's BeamIOError holding a BeamIOError holding the store's error
        storage.list_files(f'{url}/corpus')
    line = failures.reported_error(listing.value)
    said = ('the store refused the credentials (InvalidAccessKeyId: ' if url.startswith('s3://')
            else 'access to the bucket is denied (forbidden: ')
    assert line.startswith(f'{url}/corpus/**: {said}'), line
    assert 'exceptions {' not in line


def test_an_object_gone_from_gcs_is_one_line_not_a_bug(fake_gcs, monkeypatch):
    from tests.helpers import BUCKET
    from transforms import storage

    for key, value in fake_gcs.env.items():
        monkeypatch.setenv(key, value)
    storage.configure()
    with pytest.raises(Exception) as reading:  # google.api_core's NotFound: neither a ValueError nor an OSError
        storage.read_bytes(f'gs://{BUCKET}/gone/manifest.json')
    line = failures.reported_error(reading.value)
    assert line is not None and line.startswith('not found (notFound: GET '), line
