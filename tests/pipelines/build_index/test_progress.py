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
            tally = counts.Tally()
            tally.count(counts.EMBEDDED, 5)
            tally.flush()
        assert wait_for(lambda: listener.counts().get(counts.EMBEDDED) == 5)
        assert listener.senders == 1


def test_a_huge_sequence_cannot_silence_a_sender():
    with build_progress.Listener(token='t') as listener:
        assert listener.take(datagram('t', sequence=1, values={'e': 1}))
        assert not listener.take(datagram('t', sequence=2 ** 62, values={'e': 0}))  # no sender jumps so
        assert listener.take(datagram('t', sequence=2, values={'e': 2}))
        assert not listener.take(datagram('t', sequence=2, values={'e': 9}))  # overtaken
        assert listener.counts() == {'e': 2}


def test_after_a_restart_each_count_is_the_latest_attempts_that_sent_it():
    """Read and chunked again by the restarted job, then embedding: the failed attempt's counts are never added;
    a count the new attempt has not sent yet (embed) shows the failed attempt's, never more."""
    failed = [(100.0, {'read.files': 120, 'chunk.chunks': 3665}), (101.0, {'embed.chunks': 256})]
    assert build_progress.attempt_counts(failed, []) == {'read.files': 120, 'chunk.chunks': 3665, 'embed.chunks': 256}
    again = failed + [(160.0, {'read.files': 120, 'chunk.chunks': 3000})]
    assert build_progress.attempt_counts(again, [130.0]) == {'read.files': 120, 'chunk.chunks': 3000,
                                                             'embed.chunks': 256}
    embedding = again + [(170.0, {'embed.chunks': 40}), (171.0, {'embed.chunks': 60})]
    assert build_progress.attempt_counts(embedding, [130.0])['embed.chunks'] == 100
    # A second failover: the third attempt's senders alone, wherever they report.
    third = embedding + [(300.0, {'read.files': 7})]
    assert build_progress.attempt_counts(third, [130.0, 250.0])['read.files'] == 7


def test_a_listener_told_of_a_restart_counts_the_new_attempt_only():
    with build_progress.Listener(token='t') as listener:
        assert listener.take(datagram('t', sender='tm-0:9/1', values={'read.files': 3}))
        listener.restarted([time.time()])
        assert listener.counts() == {'read.files': 3}  # no new attempt's count yet
        assert listener.take(datagram('t', sender='tm-1:7/1', values={'read.files': 1}))
        assert listener.take(datagram('t', sender='tm-0:9/1', sequence=2, values={'read.files': 4}))  # late
        assert listener.counts() == {'read.files': 1}


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


def flink_on(master, *flags):
    from apache_beam.options.pipeline_options import PipelineOptions

    import pipelines.build_index.options  # noqa: F401 - the build's flags, --progress_address among them

    return PipelineOptions(['--runner', 'FlinkRunner', '--flink_master', master, '--environment_type', 'PROCESS',
                            *flags])


def test_the_address_is_this_machines_on_its_route_to_the_workers_not_the_masters_name():
    routes = {'127.0.0.1': '127.0.0.1', 'localhost': '127.0.0.1', 'tm-1': '10.0.0.2', 'tm-2': '10.0.0.2'}

    def route(host):
        if host not in routes:
            raise OSError(f'no route to {host}')
        return routes[host]

    # A TaskManager on this machine and one elsewhere: the address both reach.
    assert build_progress.choose_address(['127.0.0.1', 'tm-1'], route) == '10.0.0.2'
    assert build_progress.choose_address(['nowhere', 'tm-2'], route) == '10.0.0.2'
    # Every worker on this machine, or none routed to: the loopback.
    assert build_progress.choose_address(['localhost', '127.0.0.1'], route) == '127.0.0.1'
    assert build_progress.choose_address(['nowhere'], route) == '127.0.0.1'
    assert build_progress.choose_address([], route) == '127.0.0.1'


def test_the_route_to_the_loopback_is_the_loopback():
    assert build_progress.route_address('localhost') == '127.0.0.1'
    assert build_progress.route_address('127.0.0.1') == '127.0.0.1'
    with pytest.raises(OSError):
        build_progress.route_address('no-such-host.invalid')


def test_flinks_taskmanagers_decide_the_address_on_the_jobmanagers_host(monkeypatch):
    """The issue's case: the launcher on the JobManager's host, --flink_master localhost:8081, TaskManagers away."""
    from pipelines.build_index import flink_rest_api

    answers = {'http://localhost:8081/taskmanagers': {'taskmanagers': [
        {'id': 'tm-1', 'path': 'pekko.tcp://flink@10.0.0.3:6122/user/rpc/taskmanager_0'},
        {'id': 'tm-2', 'path': 'akka.tcp://flink@tm-2.cluster:6122/user/rpc/taskmanager_0'},
        {'id': 'tm-3', 'path': 'pekko.tcp://flink@[fd00::4]:6122/user/rpc/taskmanager_0'}]}}
    monkeypatch.setattr(flink_rest_api, 'read_json', lambda url, timeout=5.0: answers.get(url))
    assert flink_rest_api.taskmanager_hosts('http://localhost:8081') == ['10.0.0.3', 'tm-2.cluster', 'fd00::4']
    asked = []
    monkeypatch.setattr(build_progress, 'route_address', lambda host: asked.append(host) or '10.0.0.1')
    assert build_progress.progress_address(flink_on('localhost:8081')) == ('10.0.0.1', 0)
    assert asked == ['10.0.0.3']
    # Flink does not answer: the route to the master.
    assert build_progress.progress_address(flink_on('jm.cluster:8082')) == ('10.0.0.1', 0)
    assert asked[-1] == 'jm.cluster'
    # Given: as given, whatever the cluster.
    assert build_progress.progress_address(flink_on('localhost:8081', '--progress_address', 'gw:7000')) == ('gw', 7000)


def test_workers_in_or_beside_this_process_send_to_the_loopback(monkeypatch):
    from apache_beam.options.pipeline_options import PipelineOptions

    monkeypatch.setattr(build_progress, 'route_address', lambda host: pytest.fail('routed'))
    for flags in ([], ['--runner', 'FlinkRunner', '--flink_master', '[local]'],
                  ['--runner', 'FlinkRunner', '--flink_master', 'jm:8081', '--environment_type', 'LOOPBACK']):
        assert build_progress.progress_address(PipelineOptions(flags)) == ('127.0.0.1', 0)


@pytest.mark.parametrize('value, expected', [('10.0.0.1', ('10.0.0.1', 0)), ('gw.example:7000', ('gw.example', 7000)),
                                             ('h:0', ('h', 0))])
def test_a_progress_address_is_host_and_maybe_port(value, expected):
    assert build_progress.parse_progress_address(value) == expected


@pytest.mark.parametrize('value', ['', ':7000', 'h:', 'h:x', 'h:65536', 'fd00::1', 'h:-1'])
def test_anything_else_is_refused_naming_the_flag(value):
    with pytest.raises(ValueError, match=r'^--progress_address .*: expected HOST or HOST:PORT'):
        build_progress.parse_progress_address(value)


def test_an_address_not_this_machines_is_heard_on_every_interface_at_its_port():
    """A NAT's or a container's published port: the workers send to it, the launcher listens at that port."""
    with build_progress.Listener('203.0.113.7') as listener:
        port = listener.address.rsplit(':', 1)[1]
        assert listener.address == f'203.0.113.7:{port}' and listener.bound == f'0.0.0.0:{port}'
        with build_progress.reporting(f'127.0.0.1:{port}', listener.token):
            tally = counts.Tally()
            tally.count(counts.EMBEDDED, 4)
            tally.flush()
        assert wait_for(lambda: listener.counts().get(counts.EMBEDDED) == 4)
    with build_progress.Listener() as listener:
        assert listener.address == listener.bound and listener.address.startswith('127.0.0.1:')
