"""The launcher's listener: only this job's workers count, and no datagram can stop it or fail the build."""

import json
import os
import socket
import time

import pytest

from pipelines.build_index import progress as build_progress
from transforms import progress as counts


def datagram(token, sender='h:1', sequence=1, values=None, **extra):
    return json.dumps({'sender': sender, 'sequence': sequence, 'counts': values or {'embed.chunks': 3},
                       'token': token, **extra}).encode()


def wait_for(predicate, seconds=60.0):
    """Polls `predicate` until it holds or `seconds` pass (the listener reads on its own thread); returns it."""
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


@pytest.mark.parametrize('values', [
    {'embed.chunks': 10 ** 400}, {'embed.chunks': -1}, {'embed.chunks': True}, {'embed.chunks': 1.5},
    {'embed.chunks': counts.MAX_COUNT}, {'k' * 201: 1}, {f'k{i}': 1 for i in range(counts.MAX_KEYS + 1)},
])
def test_counts_out_of_bounds_are_not_a_message(values):
    assert build_progress.parse_message(datagram('t', values=values), 't') is None


@pytest.mark.parametrize('data', [
    b'[' * 60000, b'{"a":' * 60000, b'1' * 5000, b'\xff', b'null', b'[]', b'{}',
    datagram('t', sequence=True), datagram('t', sequence=0), datagram('t', sequence=2 ** 63), datagram('t', sender=''),
    datagram('t', sender=7), datagram('t', values=[1]), b'x' * 70000,
])
def test_anything_that_does_not_parse_is_not_a_message(data):
    assert build_progress.parse_message(data, 't') is None


def test_a_datagram_without_the_jobs_token_is_not_a_message():
    assert build_progress.parse_message(datagram('t'), 't') == ('h:1', 1, {'embed.chunks': 3})
    assert build_progress.parse_message(datagram('other'), 't') is None
    assert build_progress.parse_message(json.dumps({'sender': 'h:1', 'sequence': 1, 'counts': {}}).encode(), 't') is None


def test_the_listener_outlives_any_datagram_and_counts_only_its_workers(monkeypatch):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with build_progress.Listener() as listener:
        host, port = listener.address.rsplit(':', 1)
        for data in (b'[' * 60000, datagram('guess', values={'embed.chunks': 10 ** 9}),
                     datagram(listener.token, values={'embed.chunks': 10 ** 400})):
            sock.sendto(data, (host, int(port)))
        # A worker of this job, through the stages' own sender.
        with build_progress.reporting(listener.address, listener.token):
            counts.count(counts.EMBEDDED, 5)
            counts.flush()
        assert wait_for(lambda: listener.counts().get(counts.EMBEDDED) == 5)
        assert listener.senders == 1


def test_a_huge_sequence_cannot_silence_a_sender():
    with build_progress.Listener(token='t') as listener:
        assert listener.take(datagram('t', sequence=1, values={'e': 1}))
        assert not listener.take(datagram('t', sequence=2 ** 62, values={'e': 0}))  # no sender jumps so
        assert listener.take(datagram('t', sequence=2, values={'e': 2}))
        assert not listener.take(datagram('t', sequence=2, values={'e': 9}))  # overtaken
        assert listener.counts() == {'e': 2}


def test_reporting_sets_and_restores_the_address_and_token(monkeypatch):
    monkeypatch.delenv(counts.ENV, raising=False)
    monkeypatch.setenv(counts.TOKEN_ENV, 'before')
    with build_progress.reporting('127.0.0.1:9', 'tok'):
        assert (os.environ[counts.ENV], os.environ[counts.TOKEN_ENV]) == ('127.0.0.1:9', 'tok')
    assert counts.ENV not in os.environ and os.environ[counts.TOKEN_ENV] == 'before'


def test_a_listener_that_cannot_bind_leaves_the_build_without_live_counts(monkeypatch):
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.common.progress import View
    from pipelines.common.progress_meters import Meter

    def no_socket(*args, **kwargs):
        raise OSError(99, 'Cannot assign requested address')

    monkeypatch.setattr(build_progress, 'Listener', no_socket)
    with View('log', 0.1) as view:
        with build_progress.live_counts(PipelineOptions([]), view, [Meter('read', 'read.files', 'files')]):
            view.add('read.files', 2)
        assert view.counts() == {'read.files': 2}
