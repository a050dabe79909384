"""Flink's REST API read by a build (pipelines/build_index/flink_rest_api.py): pure readers of its JSON."""

from pipelines.build_index import flink_rest_api

STACK = ('org.apache.flink.runtime.JobException: Recovery is suppressed by FixedDelayRestartBackoffTimeStrategy\n'
         'Caused by: java.io.IOException: Cannot run program "/opt/venv/bin/ragsieve-sdk-worker": error=2, '
         'No such file or directory\n\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)\n'
         'Caused by: java.io.IOException: error=2, No such file or directory\n')


def history(*entries):
    return {'exceptionHistory': {'entries': list(entries), 'truncated': False}}


def test_a_worker_command_missing_on_a_taskmanager_host_is_named_with_the_host():
    line = flink_rest_api.missing_program_line(history(
        {'stacktrace': STACK, 'timestamp': 2, 'location': 'taskmanager-1:6121'}))
    assert line.startswith('the SDK worker command /opt/venv/bin/ragsieve-sdk-worker cannot run on TaskManager '
                           'taskmanager-1 (No such file or directory): install ragsieve at the same path')
    assert '--environment_config' in line


def test_other_failures_are_not_taken_for_a_missing_program():
    heartbeat = 'java.util.concurrent.TimeoutException: Heartbeat of TaskManager with id tm-0 timed out.'
    assert flink_rest_api.missing_program_line(history({'stacktrace': heartbeat, 'timestamp': 1})) is None
    assert flink_rest_api.missing_program_line({}) is None
    assert flink_rest_api.missing_program_line(history('not an entry')) is None


def test_flink_failure_line_is_the_latest_failure_and_where_it_happened():
    """Flink 1.19's `/jobs/JID/exceptions` (its exception history, latest last here) read into one line."""
    heartbeat = ('java.util.concurrent.TimeoutException: Heartbeat of TaskManager with id tm-0 timed out.\n'
                 '\tat org.apache.flink.runtime.jobmaster.JobMaster...')
    exceptions = {'root-exception': 'old', 'exceptionHistory': {'entries': [
        {'exceptionName': 'java.lang.Exception', 'stacktrace': 'java.lang.Exception: earlier\n\tat x', 'timestamp': 1},
        {'exceptionName': 'java.util.concurrent.TimeoutException', 'stacktrace': heartbeat, 'timestamp': 2,
         'taskManagerLocation': {'host': 'taskmanager-0', 'port': 6121}},
    ], 'truncated': False}}
    assert flink_rest_api.failure_line(exceptions) == (
        'java.util.concurrent.TimeoutException: Heartbeat of TaskManager with id tm-0 timed out. '
        '(on TaskManager taskmanager-0:6121)')
    assert flink_rest_api.failure_line({'exceptionHistory': {'entries': []}}) is None
    assert flink_rest_api.failure_line({'exceptionHistory': {'entries': [{'timestamp': 3}]}}) == 'an exception'


def test_flinks_view_of_a_job_running_waiting_or_moving():
    def job(state, *vertices):
        return {'state': state, 'vertices': [{'id': f'v{i}', 'status': status, 'metrics': {'read-records': n}}
                                             for i, (status, n) in enumerate(vertices)]}

    running = flink_rest_api.job_look(job('RUNNING', ('FINISHED', 5), ('RUNNING', 0)))
    assert running.running
    # An SDK worker starting, its models loading: the task holds its slot and works.
    assert flink_rest_api.job_look(job('RUNNING', ('FINISHED', 5), ('INITIALIZING', 0))).running
    waiting = flink_rest_api.job_look(job('RUNNING', ('FINISHED', 5), ('SCHEDULED', 0)))
    assert not waiting.running and waiting.progress != running.progress
    assert not flink_rest_api.job_look(job('RESTARTING', ('RUNNING', 0))).running
    moved = flink_rest_api.job_look(job('RUNNING', ('FINISHED', 5), ('SCHEDULED', 3)))
    assert moved.progress != waiting.progress
    assert flink_rest_api.job_look({}) == flink_rest_api.EngineLook(False, (None, ()))


def test_each_failure_s_time_is_a_restart_in_seconds_since_the_epoch():
    assert flink_rest_api.failure_times(history({'timestamp': 2500}, {'timestamp': 1000}, {'no': 1}, 'x')) == [1.0, 2.5]
    assert flink_rest_api.failure_times({}) == []
