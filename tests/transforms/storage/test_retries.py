"""Transient S3 faults: which are tried again, how long apart, for how long, and the one line after."""

import pytest

from transforms.storage import retries


def test_the_bound_is_a_finite_number_of_seconds():
    assert retries.check_seconds(0) == 0.0 and retries.check_seconds(180) == 180.0
    for bad in (-1, float('inf'), float('nan')):
        with pytest.raises(ValueError, match='^--store_retry_seconds must be a finite number >= 0'):
            retries.check_seconds(bad)


def test_no_answer_and_server_errors_are_transient_refusals_are_not():
    from botocore import exceptions

    class Answer:
        def __init__(self, status):
            self.status_code = status

    assert retries.is_transient(exceptions.EndpointConnectionError(endpoint_url='http://store'))
    assert retries.is_transient(exceptions.ConnectionClosedError(endpoint_url='http://store'))
    assert retries.is_transient(response=(Answer(503), {}))
    assert not retries.is_transient(response=(Answer(404), {})) and not retries.is_transient(response=(Answer(412), {}))


def test_tries_back_off_to_a_ceiling():
    assert [retries.delay(n) for n in (1, 2, 3, 4, 5, 6, 10)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_a_store_that_never_answered_is_one_line_naming_the_bound(monkeypatch):
    from botocore import exceptions

    monkeypatch.setitem(retries._settings, 'seconds', 7.0)
    error = exceptions.EndpointConnectionError(endpoint_url='http://127.0.0.1:9/b/k')
    line = retries.unreachable_line(error)
    assert line == ('the object store did not answer for 7 s (--store_retry_seconds): Could not connect to the '
                    'endpoint URL: "http://127.0.0.1:9/b/k"; nothing was published')
    assert retries.unreachable_line(ValueError('a bad flag')) is None
    given_up = retries.StoreUnreachable('127.0.0.1:9', error)
    assert retries.unreachable_line(given_up).startswith('the object store did not answer for 7 s (--store_retry_'
                                                         'seconds): 127.0.0.1:9 did not answer: Could not connect')


def test_after_the_bound_beams_s3_filesystem_does_not_try_again():
    from apache_beam.io.aws.clients.s3 import boto3_client, messages
    from apache_beam.utils import retry

    given_up = retries.StoreUnreachable('127.0.0.1:9', OSError('refused'))
    wrapped = messages.S3ClientError(str(given_up), boto3_client.get_http_error_code(given_up))
    assert not retry.retry_on_server_errors_and_timeout_filter(wrapped)
    assert retries.unreachable_line(wrapped) is not None
