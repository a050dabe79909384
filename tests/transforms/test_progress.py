"""The workers' side of live progress: each stage instance's cumulative counts sent over UDP, throttled, nothing
without the address."""

import json
import pickle
import socket
import types

import pytest

from transforms import progress


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """The senders' clock, moved only by the test (`clock.now`), and no channel left by another test."""
    clock = types.SimpleNamespace(now=1000.0)
    monkeypatch.setattr(progress, 'time', types.SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(progress, '_channel', None)
    return clock


@pytest.fixture
def receiver(monkeypatch):
    """A UDP socket on the loopback, its address in the environment the stages read."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(('127.0.0.1', 0))
    monkeypatch.setenv(progress.ENV, f'127.0.0.1:{sock.getsockname()[1]}')
    yield sock
    sock.close()


def received(sock, expected: int) -> list[dict]:
    """The next `expected` messages, each waited for up to a minute, and any more that follow at once."""
    sock.settimeout(60)
    messages = [json.loads(sock.recv(65536)) for _ in range(expected)]
    sock.settimeout(0.3)  # only to see a message too many (a later one goes unseen, never fails a test)
    try:
        while True:
            messages.append(json.loads(sock.recv(65536)))
    except socket.timeout:
        return messages


def test_counts_are_sent_cumulative_at_most_every_half_second(receiver, clock):
    tally = progress.Tally()
    tally.count(progress.CHUNKS, 3)  # a new tally: the first count is sent at once
    clock.now += progress.SEND_SECONDS - 0.01
    tally.count(progress.CHUNKS, 4)
    tally.count(progress.EMBEDDED, 2)
    first = received(receiver, 1)
    assert [m['counts'] for m in first] == [{progress.CHUNKS: 3}]
    clock.now += 0.01
    tally.count(progress.CHUNKS, 1)
    (second,) = received(receiver, 1)
    assert second['counts'] == {progress.CHUNKS: 8, progress.EMBEDDED: 2}
    assert second['sender'] == first[0]['sender'] and second['sequence'] > first[0]['sequence']


def test_flush_sends_what_the_throttle_held_back(receiver):
    tally = progress.Tally()
    tally.count(progress.PARTS)
    tally.count(progress.PARTS)
    tally.flush()
    assert [m['counts'] for m in received(receiver, 2)] == [{progress.PARTS: 1}, {progress.PARTS: 2}]


def test_a_new_address_starts_the_counts_again(receiver, monkeypatch):
    tally = progress.Tally()
    tally.count(progress.FILES, 5)
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(('127.0.0.1', 0))
    other.settimeout(60)
    monkeypatch.setenv(progress.ENV, f'127.0.0.1:{other.getsockname()[1]}')
    tally.count(progress.FILES, 1)
    assert json.loads(other.recv(65536))['counts'] == {progress.FILES: 1}
    other.close()


@pytest.mark.parametrize('value', [None, '', 'no-port', 'host:99999'])
def test_without_a_usable_address_nothing_is_sent_and_nothing_fails(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(progress.ENV, raising=False)
    else:
        monkeypatch.setenv(progress.ENV, value)
    tally = progress.Tally()
    tally.count(progress.CHUNKS, 3)
    tally.flush()


def test_a_listener_gone_does_not_fail_the_stage(monkeypatch):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(('127.0.0.1', 0))
    monkeypatch.setenv(progress.ENV, f'127.0.0.1:{sock.getsockname()[1]}')
    sock.close()
    tally = progress.Tally()
    for _ in range(3):
        tally.count(progress.CHUNKS)
        tally.flush()


def test_parse_address():
    assert progress.parse_address('127.0.0.1:4000') == ('127.0.0.1', 4000)
    with pytest.raises(ValueError, match='HOST:PORT'):
        progress.parse_address(':4000')


def test_each_key_is_the_beam_counter_of_the_same_count():
    assert progress.filter_key('filter_0_exact', progress.DROPPED) == 'filter_0_exact.dropped'
    assert progress.EMBEDDED == 'embed.chunks' and progress.CHUNKS == 'chunk.chunks'


def test_each_datagram_carries_the_jobs_token(receiver, monkeypatch):
    monkeypatch.setenv(progress.TOKEN_ENV, 'job-secret')
    progress.Tally().count(progress.CHUNKS, 2)
    assert [m['token'] for m in received(receiver, 1)] == ['job-secret']


def test_each_copy_of_a_stage_counts_as_a_sender_of_its_own(receiver):
    """A DoFn's tally, deserialized once per bundle processor (a restarted attempt's are new copies), counts
    from zero under its own name, so the launcher can tell an attempt's counts from a failed one's."""
    stage = progress.Tally()
    stage.count(progress.EMBEDDED, 7)
    copy = pickle.loads(pickle.dumps(stage))
    copy.count(progress.EMBEDDED, 2)
    first, second = received(receiver, 2)
    assert (first['counts'], second['counts']) == ({progress.EMBEDDED: 7}, {progress.EMBEDDED: 2})
    assert first['sender'] != second['sender'] and second['sequence'] == 1
    assert first['sender'].rsplit('/', 1)[0] == second['sender'].rsplit('/', 1)[0]  # the same process
