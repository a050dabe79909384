"""A job server that could not hand the job to Flink: the address it tried, from its messages."""

import pytest

from pipelines.build_index import job_server

REFUSED = ('java.lang.RuntimeException: java.util.concurrent.ExecutionException: '
           'org.apache.flink.runtime.client.JobSubmissionException: Failed to submit JobGraph.\n'
           '\tat org.apache.flink.util.ExceptionUtils.rethrow(ExceptionUtils.java:321)\n'
           'Caused by: java.util.concurrent.CompletionException: org.apache.flink.shaded.netty4.io.netty.channel.'
           'AbstractChannel$AnnotatedConnectException: Connection refused: localhost/127.0.0.1:8081\n'
           'Caused by: java.net.ConnectException: Connection refused\n')


def test_the_address_a_job_server_could_not_submit_to_is_found_in_its_stack_trace():
    assert job_server.unreached_flink(REFUSED) == ('localhost:8081', 'Connection refused')
    timed_out = REFUSED.replace('Connection refused: localhost/127.0.0.1:8081',
                                'connection timed out: jobmanager/10.47.0.3:8081')
    assert job_server.unreached_flink(timed_out) == ('jobmanager:8081', 'connection timed out')
    unknown = ('org.apache.flink.runtime.client.JobSubmissionException: Failed to submit JobGraph.\n'
               'Caused by: java.net.UnknownHostException: jobmanagr: Name or service not known')
    assert job_server.unreached_flink(unknown) == ('jobmanagr', 'no such host')


def test_a_job_that_ran_and_failed_is_not_taken_for_a_submission_that_failed():
    ran = REFUSED.replace('JobSubmissionException: Failed to submit JobGraph.', 'JobExecutionException: Job failed.')
    assert job_server.unreached_flink(ran) is None
    assert job_server.unreached_flink('java.io.IOException: Insufficient number of network buffers') is None


def test_the_line_names_the_job_server_the_flink_address_and_what_to_do():
    line = job_server.unreached_flink_line('launcher:8199', REFUSED)
    assert line.startswith('error: the job server at launcher:8199 (--job_endpoint) could not reach Flink at '
                           'localhost:8081 (Connection refused)')
    assert '--flink_master HOST:PORT' in line and '\n' not in line
    assert job_server.unreached_flink_line('launcher:8199', 'java.io.IOException: no buffers') is None


def test_a_result_without_messages_gives_no_text():
    assert job_server.messages(object()) == ''


class RpcError(Exception):
    """What gRPC raises: `code()` and `details()`."""

    def __init__(self, details):
        super().__init__(details)
        self._details = details

    def code(self):
        return type('Code', (), {'name': 'UNAVAILABLE'})()

    def details(self):
        return self._details


def test_a_wildcard_artifact_address_given_by_the_job_server_is_one_line_saying_which_flag_to_pass():
    error = RpcError('failed to connect to all addresses; last error: UNKNOWN: ipv4:0.0.0.0:8098: Failed to connect '
                     'to remote host: Connection refused')
    assert job_server.submission_line('jobserver:8099', error) == (
        "the job server at jobserver:8099 (--job_endpoint) gave 0.0.0.0:8098 as its artifact service's address, "
        'which names no host (UNAVAILABLE): pass --artifact_endpoint jobserver:8098, or start the job server with '
        "--job-host set to its host's name")
    with pytest.raises(ValueError, match=r'^the job server at jobserver:8099 \(--job_endpoint\) gave 0.0.0.0:8098'):
        with job_server.submitting('jobserver:8099'):
            raise error


def test_another_grpc_error_while_submitting_names_the_job_server_and_other_errors_pass():
    error = RpcError('failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.9:8098: Connection refused')
    assert job_server.submission_line('js:8099', error) == (
        'the job server at js:8099 (--job_endpoint) could not be reached at 10.0.0.9:8098 while the job was submitted '
        '(UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.9:8098: Connection '
        'refused)')
    assert job_server.submission_line('js:8099', RuntimeError('x')) is None
    with pytest.raises(KeyError):
        with job_server.submitting('js:8099'):
            raise KeyError('mine')
    with pytest.raises(RpcError):
        with job_server.submitting(None):
            raise error
