"""A build's job on an engine: bounded when it makes no progress, cancelled when its job service is lost or on Ctrl-C."""

import itertools
import logging
import socket
import threading
import types

import grpc
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import cli
from pipelines.build_index import engine_job, flink_rest_api
from pipelines.common import exits, failures
from tests.helpers import fake_flink_rest


# Longer than any test here waits for its fake job: a job neither cancelled nor ended by then fails the test.
JOB_SECONDS = 120


class FakeResult:
    """A PipelineResult whose job runs until cancelled or `end` (or for `after` seconds), then ends as told."""

    def __init__(self, ends_with=None, after=None):
        self.cancelled, self.finished = threading.Event(), threading.Event()
        self.ends_with, self.after = ends_with, after

    def end(self):
        self.finished.set()

    def wait_until_finish(self):
        if not self.finished.wait(JOB_SECONDS if self.after is None else self.after) and self.after is None:
            raise AssertionError(f'the fake job was neither cancelled nor ended in {JOB_SECONDS} s')
        if self.cancelled.is_set():
            return 'CANCELLED'
        if self.ends_with is not None:
            raise self.ends_with
        return 'DONE'

    def cancel(self):
        self.cancelled.set()
        self.finished.set()


def seconds_apart(step):
    """A clock for `engine_job.wait` that moves `step` seconds each time it is read: one look at the job."""
    ticks = itertools.count(step=step)
    return lambda: float(next(ticks))


class LostJobService(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE


@pytest.fixture(autouse=True)
def services_answer(monkeypatch):
    """Every service a job's flags name answers (the unit here is the wait, not the network): a test that loses
    one passes its own `SilentServices` answer or `silent`."""
    monkeypatch.setattr(engine_job, 'answers', lambda host, port, timeout=None: True)


def flink(*flags):
    return PipelineOptions(['--runner', 'FlinkRunner', '--flink_master', 'localhost:1', *flags])


def local_counts(counts):
    """Live counts of workers on this machine (the one-host engines'), as `progress.live_counts` gives them."""
    return engine_job.LiveCounts(counts, arrived=lambda: False, local=True)


def unseen(counts):
    """Live counts sent to an address no count arrives at (workers on other hosts, a wrong --progress_address)."""
    return engine_job.LiveCounts(counts, arrived=lambda: False, local=False)


def test_a_stall_is_progress_unchanged_for_the_timeout():
    stall = engine_job.Stall(10, now=0)
    assert not stall.stalled({'a': 1}, 0) and not stall.stalled({'a': 1}, 9.9)
    assert stall.stalled({'a': 1}, 10)
    assert not stall.stalled({'a': 2}, 15) and not stall.stalled({'a': 2}, 24) and stall.stalled({'a': 2}, 25)
    never = engine_job.Stall(0, now=0)
    assert not never.stalled({}, 0) and not never.stalled({}, 10 ** 9)


@pytest.mark.parametrize('seconds', [-1, float('inf'), float('nan')])
def test_a_stall_timeout_must_be_zero_or_positive(seconds):
    with pytest.raises(ValueError, match='--engine_stall_timeout must be 0'):
        engine_job.check_stall_timeout(seconds)


def test_a_job_without_progress_is_cancelled_and_ends_in_one_line():
    result = FakeResult()  # runs until cancelled
    with pytest.raises(engine_job.JobEnded, match=r'^error: the job made no progress on flink for 60 s '
                                                  r'\(--engine_stall_timeout\): cancelled through the job service'):
        engine_job.wait(result, flink(), local_counts(lambda: {'read.files': 2}), 60, clock=seconds_apart(10),
                        poll=0.01)
    assert result.cancelled.is_set()
    assert engine_job.JobEnded.exit_code == exits.JOB_FAILED


def test_a_stalled_job_s_line_names_where_its_counts_stopped():
    result = FakeResult()
    live = engine_job.LiveCounts(lambda: {'embed.chunks': 256}, arrived=lambda: True, local=True,
                                 where=lambda: 'read 120/120 files; embed 256/3,665 chunks')
    with pytest.raises(engine_job.JobEnded, match=r'for 60 s \(--engine_stall_timeout\) \(stopped at: read 120/120 '
                                                  r'files; embed 256/3,665 chunks\): cancelled'):
        engine_job.wait(result, flink(), live, 60, clock=seconds_apart(10), poll=0.01, look=lambda: None)


def test_the_restarts_flink_records_reach_the_live_counts_where_they_restart_the_whole_job(monkeypatch):
    """Flink's exception history is read every few polls; its failures' times go to the live counts, which count
    the new attempt only from then on; a BATCH job restarts regions, not the job: nothing is told."""
    history = {'exceptionHistory': {'entries': [{'timestamp': 1_700_000_000_500}, {'timestamp': 'later'}]}}
    monkeypatch.setattr(engine_job, 'flink_exceptions', lambda options: history)
    for flags, expected in (((), [1_700_000_000.5]), (('--execution_mode_for_batch', 'BATCH_FORCED'), None)):
        told = []
        result = FakeResult(after=0.3)
        live = engine_job.LiveCounts(itertools.count().__next__, arrived=lambda: True, local=True,
                                     restarted=told.append)
        engine_job.wait(result, flink(*flags), live, 0, poll=0.01, look=lambda: None)
        assert (told[-1] if told else None) == expected


def test_a_failed_job_whose_service_does_not_answer_leads_its_line_with_it():
    """Java names the exception, not the host: the launcher's line names the service that no longer answers."""
    failed = RuntimeError('Pipeline BeamApp-1 failed in state FAILED: java.net.NoRouteToHostException: No route to '
                          'host\n\tat sun.nio.ch...')
    lost = 'the Flink JobManager at jobmanager:8081 (--flink_master) does not answer'
    with pytest.raises(engine_job.JobEnded) as ended:
        engine_job.wait(FakeResult(ends_with=failed, after=0.05), flink(), None, 0, poll=0.01, look=lambda: None,
                        silent=lambda: lost)
    assert str(ended.value) == (f'error: {lost}: the engine ended job BeamApp-1 FAILED: '
                                'java.net.NoRouteToHostException: No route to host; nothing was published')
    # Every service answers: the failure is reported as it was.
    with pytest.raises(RuntimeError, match='^Pipeline BeamApp-1 failed'):
        engine_job.wait(FakeResult(ends_with=failed, after=0.05), flink(), None, 0, poll=0.01, look=lambda: None)


def test_a_build_that_lost_its_lease_cancels_its_job_in_one_line_naming_the_silent_store():
    result, asked = FakeResult(), itertools.count()
    why = 'the lease s3://b/root/.lock on s3://b/root was lost: no renewal succeeded for 23 s'

    def lost():
        return why if next(asked) >= 3 else None

    with pytest.raises(engine_job.JobEnded) as ended:
        engine_job.wait(result, flink(), None, 0, poll=0.01, look=lambda: None, lost=lost,
                        silent=lambda: 'the object store at storage:9000 (AWS_ENDPOINT_URL_S3) does not answer')
    assert result.cancelled.is_set()
    assert str(ended.value).startswith(f'error: the object store at storage:9000 (AWS_ENDPOINT_URL_S3) does not '
                                       f'answer: {why}: cancelled through the job service')


def test_a_job_server_or_jobmanager_that_accepts_nothing_for_the_bound_is_lost():
    """A host cut off drops packets: Beam's stream from a job server there waits on without an error, a job
    server that lost its JobManager fails the job only after minutes; the launcher asks each itself now and then,
    and counts one lost once nothing answered for the bound (a blip is forgotten)."""
    now = [0]

    def answer(host, port):  # the job server misses one look (a blip), the JobManager is gone from 10 s on
        return not ((host == 'jobserver' and now[0] == 20) or (host == 'jobmanager' and now[0] >= 10))

    watched = [('Beam job server', 'jobserver', 8099), ('Flink JobManager', 'jobmanager', 8081)]
    watch = engine_job.SilentServices(watched, after=30, answer=answer)
    seen = []
    for now[0] in (0, 10, 20, 30, 39, 40):
        seen.append(watch.lost(now[0]))
    assert seen == [None, None, None, None, None, 'Flink JobManager']
    assert engine_job.SilentServices([]).lost(10 ** 6) is None
    portable = PipelineOptions(['--runner', 'PortableRunner', '--job_endpoint', 'jobserver:8099', '--flink_master',
                                'jobmanager:8081'])
    assert engine_job.watched_services(portable) == watched
    assert engine_job.watched_services(flink()) == [('Flink JobManager', 'localhost', 1)]


def test_a_job_whose_counts_move_is_never_stalled():
    result = FakeResult()
    looks = itertools.count()

    def progress():  # a new count at each look, 10 s apart: an unchanged one would stall at the second
        seen = next(looks)
        if seen == 20:
            result.end()
        return seen

    engine_job.wait(result, flink(), local_counts(progress), 5, clock=seconds_apart(10), poll=0.01)
    assert not result.cancelled.is_set()


def test_without_live_counts_nor_a_view_of_the_engine_nothing_but_the_engine_bounds_the_job():
    result = FakeResult(after=0.5)
    engine_job.wait(result, flink(), None, 0.1, poll=0.05, look=lambda: None)
    assert not result.cancelled.is_set()


def test_a_job_whose_counts_never_arrive_is_not_cancelled_while_the_engine_shows_it_working():
    """Workers on other hosts, sending to an address they cannot reach: Flink's tasks run, the job goes on."""
    result = FakeResult()
    looks = itertools.count()

    def look():  # the same view at every look, a task running, for 20 looks 10 s apart (a 5 s bound)
        if next(looks) == 20:
            result.end()
        return flink_rest_api.EngineLook(running=True, progress=('RUNNING', ()))

    engine_job.wait(result, flink(), unseen(lambda: {}), 5, clock=seconds_apart(10), poll=0.01, look=look)
    assert not result.cancelled.is_set()


def test_a_job_that_waits_on_the_engine_is_cancelled_though_no_count_arrives():
    """No task runs (no slot for it) and nothing moves: the engine's view is the progress, and it stood still."""
    result = FakeResult()
    waiting = flink_rest_api.EngineLook(running=False, progress=('RUNNING', (('v1', 'SCHEDULED', (0, 0, 0, 0)),)))
    with pytest.raises(engine_job.JobEnded, match=r'^error: the job made no progress on flink for 60 s'):
        engine_job.wait(result, flink(), unseen(lambda: {}), 60, clock=seconds_apart(10), poll=0.01,
                        look=lambda: waiting)
    assert result.cancelled.is_set()


def test_the_stall_bound_judges_counts_that_reach_the_launcher_else_the_engine():
    working = flink_rest_api.EngineLook(running=True, progress='p')
    # Counts known to reach: they are the progress, the engine's moves beside them; a running task is no excuse.
    assert engine_job.judged(True, {'a': 1}, working) == (({'a': 1}, 'p'), False)
    assert engine_job.judged(True, {'a': 1}, None) == (({'a': 1}, None), False)
    # Not known to reach: the engine alone; nothing at all: nothing to judge by.
    assert engine_job.judged(False, {}, working) == ('p', True)
    assert engine_job.judged(False, {}, None) is None
    # Known to reach: a count arrived, or workers on this machine where no engine can be asked (Flink can).
    here, there = local_counts(dict), unseen(dict)
    assert engine_job.counts_reach(here, engine_asked=False) and not engine_job.counts_reach(here, engine_asked=True)
    assert not engine_job.counts_reach(there, engine_asked=False) and not engine_job.counts_reach(None, False)
    arrived = engine_job.LiveCounts(dict, arrived=lambda: True, local=False)
    assert engine_job.counts_reach(arrived, engine_asked=True)


def test_a_flink_job_not_submitted_yet_is_not_judged_by_counts_that_never_came():
    """Flink shows no job while the job server prepares it: counts that cannot arrive do not stall it meanwhile."""
    result = FakeResult()
    looks = itertools.count()

    def look():
        if next(looks) == 20:
            result.end()
        return None

    engine_job.wait(result, flink(), local_counts(lambda: {}), 5, clock=seconds_apart(10), poll=0.01, look=look)
    assert not result.cancelled.is_set()


def test_once_counts_arrive_flink_is_looked_at_every_thirty_polls():
    """Each look copies the whole job in Flink's JobManager: a core's worth at 10,000 tasks, read every second."""
    result, polls, looks, arrived = FakeResult(), itertools.count(), [], threading.Event()

    def progress():
        seen = next(polls)
        if seen == 10:
            arrived.set()  # the first count arrives at the tenth poll
        if seen == 10 + 3 * engine_job.LOOK_EVERY_COUNTING:
            result.end()
        return seen

    def look():
        looks.append(arrived.is_set())
        return flink_rest_api.EngineLook(running=True, progress=len(looks))

    counts = engine_job.LiveCounts(progress, arrived=arrived.is_set, local=True)
    engine_job.wait(result, flink(), counts, 10**6, clock=seconds_apart(1), poll=0.001, look=look)
    assert looks.count(False) >= 9 and looks.count(True) <= 4  # every poll until then, every 30th after


def test_a_working_engine_restarts_the_stall_clock():
    stall = engine_job.Stall(10, now=0)
    assert not stall.stalled('p', 0) and not stall.stalled('p', 9, working=True)
    assert not stall.stalled('p', 18) and stall.stalled('p', 19)


def test_the_stall_bound_says_when_it_cannot_see_the_job():
    import pipelines.build_index.options  # noqa: F401 - the build's flags, --engine_stall_timeout among them

    spark = ['--runner', 'SparkRunner', '--spark_master_url', 'spark://10.0.0.5:7077']
    assert 'bounds the job only once' in engine_job.stall_note(PipelineOptions(spark), local_counts=False)
    assert engine_job.stall_note(PipelineOptions(spark), local_counts=True) is None
    assert engine_job.stall_note(PipelineOptions(spark + ['--engine_stall_timeout', '0']), False) is None
    assert engine_job.stall_note(flink(), local_counts=False) is None  # Flink's REST API shows the job


def test_a_lost_job_service_cancels_the_job_and_is_one_line():
    result = FakeResult(ends_with=LostJobService(), after=0)
    with pytest.raises(engine_job.JobEnded, match=r'^error: lost the job service \(UNAVAILABLE\) while the job ran '
                                                  r'on flink: cancelled through the job service'):
        engine_job.wait(result, flink(), None, 900, poll=0.05)
    assert result.cancelled.is_set()


def test_the_jobs_own_failure_is_raised_as_it_was():
    failure = RuntimeError('Pipeline job-1 failed in state FAILED: java.io.IOException: no buffers')
    with pytest.raises(RuntimeError) as raised:
        engine_job.wait(FakeResult(ends_with=failure, after=0), flink(), None, 900, poll=0.05)
    assert raised.value is failure


def test_ctrl_c_cancels_the_job_then_interrupts():
    result = FakeResult()  # runs until cancelled
    looks = itertools.count()

    def progress():
        # Read by `wait` on the launcher's thread while the job runs: Ctrl-C arrives there, inside `wait`, as
        # Python's SIGINT handler raises it (no signal: a process started in the background ignores SIGINT).
        if next(looks) == 0:
            raise KeyboardInterrupt
        return 0

    with pytest.raises(KeyboardInterrupt):
        engine_job.wait(result, flink(), local_counts(progress), 900, clock=lambda: 0.0, poll=0.01)
    assert result.cancelled.is_set()


def test_the_direct_runner_is_waited_for_as_beam_does():
    result = FakeResult(after=0)
    engine_job.wait(result, PipelineOptions([]), local_counts(lambda: 0), 0.01, poll=0.01)
    assert not result.cancelled.is_set()


def test_a_master_nothing_answers_at_is_refused_at_once(monkeypatch):
    with socket.socket() as s:  # a port no one listens on
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    tried = []

    def create_connection(address, timeout):
        tried.append(address)
        return socket.create_connection(address, timeout=timeout)

    monkeypatch.setattr(engine_job, 'socket', types.SimpleNamespace(create_connection=create_connection))
    with pytest.raises(ValueError, match=rf'^--flink_master 127.0.0.1:{port}: nothing answers there'):
        engine_job.check_reachable(flink('--flink_master', f'127.0.0.1:{port}'))
    with pytest.raises(ValueError, match=rf'^--flink_master localhost:{port}: nothing answers there'):
        engine_job.check_reachable(flink('--flink_master', f'localhost:{port}'))
    with pytest.raises(ValueError, match=rf'^--spark_master_url 127.0.0.1:{port}: nothing answers there'):
        engine_job.check_reachable(PipelineOptions(['--runner', 'SparkRunner',
                                                    '--spark_master_url', f'spark://127.0.0.1:{port}']))
    # One try each, nothing waited for: a refused connection is the answer.
    assert tried == [('127.0.0.1', port), ('localhost', port), ('127.0.0.1', port)]
    for embedded in (flink('--flink_master', '[local]'), PipelineOptions(['--runner', 'SparkRunner']),
                     PipelineOptions(['--runner', 'SparkRunner', '--spark_master_url', 'local[4]']),
                     PipelineOptions(['--runner', 'DirectRunner'])):
        engine_job.check_reachable(embedded)
    assert len(tried) == 3  # an embedded engine has nothing to reach


def test_a_flink_job_is_cancelled_by_its_name_through_the_rest_api_when_the_job_service_is_gone():
    jobs = [{'jid': 'a1', 'name': 'ragsieve-r1-7', 'state': 'RUNNING'},
            {'jid': 'b2', 'name': 'ragsieve-r1-7', 'state': 'FINISHED'},
            {'jid': 'c3', 'name': 'someone-else', 'state': 'RUNNING'}]
    with fake_flink_rest(jobs) as (rest, patched):
        options = engine_job.with_job_name(flink('--flink_master', rest.split('//')[1]), 'R1-7')

        class Gone(FakeResult):
            def cancel(self):
                raise LostJobService()

        said = engine_job.cancel(Gone(), options)
    assert patched == ['/jobs/a1?mode=cancel']
    assert said == 'the job service did not answer (LostJobService); Flink job a1 cancelled'


def test_a_given_job_name_is_kept_and_only_flink_jobs_get_one():
    assert engine_job.with_job_name(flink('--job_name', 'mine'), 'x').get_all_options()['job_name'] == 'mine'
    assert engine_job.with_job_name(flink(), 'R1').get_all_options()['job_name'] == 'ragsieve-r1'
    spark = PipelineOptions(['--runner', 'SparkRunner'])
    assert engine_job.with_job_name(spark, 'x').get_all_options()['job_name'] is None


def test_the_jobs_error_messages_stay_off_stderr_unless_asked(monkeypatch, capsys):
    def record():
        return logging.LogRecord('root', logging.ERROR, '/x/apache_beam/runners/portability/portable_runner.py', 1,
                                 'Traceback (most recent call last): ... ValueError: bad', None, None,
                                 func='read_messages')

    handler = logging.StreamHandler()
    logging.getLogger().addHandler(handler)
    try:
        with engine_job.quiet_job_messages():
            logging.getLogger().handle(record())
        assert 'Traceback' not in capsys.readouterr().err
        monkeypatch.setenv('RAGSIEVE_TRACEBACK', '1')
        with engine_job.quiet_job_messages():
            logging.getLogger().handle(record())
        assert 'Traceback' in capsys.readouterr().err
    finally:
        logging.getLogger().removeHandler(handler)


def test_job_ended_is_one_line_and_exit_6(capsys):
    def run(argv):
        raise engine_job.JobEnded('error: the job made no progress on spark for 60 s (--engine_stall_timeout): '
                                  'cancelled through the job service; nothing was published')

    assert failures.run_and_report('build', run, []) == 6
    assert capsys.readouterr().err.splitlines() == [
        'ragsieve build: error: the job made no progress on spark for 60 s (--engine_stall_timeout): '
        'cancelled through the job service; nothing was published']


def test_a_build_sent_to_a_master_nothing_answers_at_fails_at_once(tmp_path, capsys, monkeypatch):
    from pipelines.build_index import job

    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'a.md').write_text('# A\n\nSome text.\n')
    loaded = []

    def load_models(*args, **kwargs):
        loaded.append(args)
        raise AssertionError('the models were loaded')

    monkeypatch.setattr(job, 'load_models', load_models)
    assert cli.main(['build', '--input', str(tmp_path / 'docs'), '--output', str(tmp_path / 'out'),
                     '--runner', 'FlinkRunner', '--flink_master', f'localhost:{port}']) == exits.FAILED
    assert not loaded  # refused before the models load (and before the locks: no output below)
    assert capsys.readouterr().err.splitlines() == [
        f'ragsieve build: error: --flink_master localhost:{port}: nothing answers there (Connection refused); '
        'start the cluster (python -m engines start ...) or correct the flag']
    assert not (tmp_path / 'out').exists()


def portable(*flags):
    return PipelineOptions(['--runner', 'PortableRunner', '--job_endpoint', 'jobserver:8099', *flags])


def test_a_portable_build_with_a_flink_master_is_named_looked_at_and_cancelled_through_flinks_rest_api():
    options = engine_job.with_job_name(portable('--flink_master', 'jobmanager:8081'), 'R1-7')
    assert engine_job.flink_rest(options) == 'http://jobmanager:8081'
    assert options.get_all_options()['job_name'] == 'ragsieve-r1-7'
    assert engine_job.engine_look(options) is not None
    assert engine_job.stall_note(options, local_counts=False) is None


def test_a_portable_build_without_a_flink_address_is_neither_named_nor_seen_on_flink():
    for options in (portable(), portable('--flink_master', '[auto]'),
                    PipelineOptions(['--runner', 'PortableRunner', '--job_endpoint', 'embed',
                                     '--flink_master', 'jobmanager:8081'])):
        assert engine_job.flink_rest(options) is None
        assert engine_job.with_job_name(options, 'x').get_all_options()['job_name'] is None


class FakeMessage:
    def __init__(self, text):
        self.message_response = types.SimpleNamespace(message_text=text)

    def HasField(self, name):  # noqa: N802 (protobuf's name)
        return name == 'message_response'


def test_a_job_server_that_could_not_reach_flink_is_one_line_naming_both():
    trace = ('java.lang.RuntimeException: org.apache.flink.runtime.client.JobSubmissionException: Failed to submit '
             'JobGraph.\nCaused by: org.apache.flink.shaded.netty4.io.netty.channel.AbstractChannel$Annotated'
             'ConnectException: Connection refused: localhost/127.0.0.1:8081')
    result = FakeResult(ends_with=RuntimeError('Pipeline j failed in state FAILED: java.net.ConnectException: '
                                               'Connection refused'), after=0)
    result._messages = [FakeMessage(trace), FakeMessage('java.net.ConnectException: Connection refused')]
    with pytest.raises(engine_job.JobEnded, match=r'^error: the job server at jobserver:8099 \(--job_endpoint\) '
                                                  r'could not reach Flink at localhost:8081 \(Connection refused\)'):
        engine_job.wait(result, portable(), None, 900, poll=0.05)


def test_counts_that_never_arrive_while_the_job_runs_are_said_once():
    working = flink_rest_api.EngineLook(running=True, progress='p')
    waiting = flink_rest_api.EngineLook(running=False, progress='q')
    silent = engine_job.SilentWorkers(after=30)
    away = engine_job.LiveCounts(lambda: {}, arrived=lambda: False, local=False)
    assert silent.note(away, waiting, 0) is None  # the tasks wait for slots: no worker runs to send counts
    assert silent.note(away, working, 10) is None and silent.note(away, working, 39) is None
    said = silent.note(away, working, 40)
    assert said.startswith("no worker's counts reached this launcher in 30 s") and '--progress_address' in said
    assert silent.note(away, working, 80) is None  # once
    arrived = engine_job.LiveCounts(lambda: {}, arrived=lambda: True, local=False)
    assert engine_job.SilentWorkers(after=30).note(arrived, working, 0) is None
    assert engine_job.SilentWorkers(after=0).note(arrived, working, 100) is None
