"""Leases on object stores: one holder at a time, refusals name it, an expired lease is taken over, a lost one stops."""

import time

import pytest

from tests.helpers import fault_proxy
from transforms import storage
from transforms.storage import leases, object_writes


def test_a_lease_body_is_read_back_and_anything_else_counts_as_expired():
    body = leases.read_body(leases.lease_body('host:1', 1000.0, 30))
    assert body == {'holder': 'host:1', 'expires_at': 1000.0, 'seconds': 30}
    assert not leases.is_expired(body, 999.9) and leases.is_expired(body, 1000.0)
    for junk in (b'', b'\xff', b'[' * 60000, b'{"holder": 1, "expires_at": 5}', b'{"holder": "h", "expires_at": true}'):
        assert leases.read_body(junk) is None and leases.is_expired(leases.read_body(junk), 0)


def test_a_lease_must_last(object_store):
    with pytest.raises(ValueError, match='more than 0 seconds'):
        leases.Lease(f'{object_store}/.lock', object_store, seconds=0)


def test_one_holder_at_a_time_and_the_refusal_names_it(object_store):
    path = f'{object_store}/.lock'
    with leases.held(path, object_store, seconds=30):
        second = leases.Lease(path, object_store, seconds=30, holder='other:2')
        with pytest.raises(leases.Held, match=rf'writing to {object_store} \(held by .+:\d+, lease {path} expires'):
            second.acquire()
    assert object_writes.read_versioned(path) is None  # given back
    with leases.held(path, object_store, seconds=30):  # and free again
        pass


def test_an_expired_lease_is_taken_over_and_its_old_holder_finds_it_lost(object_store):
    path = f'{object_store}/.lock'
    stalled = leases.Lease(path, object_store, seconds=1.5, holder='stalled:1')
    stalled.acquire()
    stalled._stop.set()  # as a holder that stopped renewing (SIGSTOP, a long pause)
    stalled._thread.join()
    time.sleep(1.6)
    with leases.held(path, object_store, seconds=30) as taker:
        taker.check()
        # The stalled holder's next renewal is refused: its version is no longer the object's.
        assert object_writes.replace_if_version(path, b'x', stalled._version) is None
    stalled.release()


def test_the_job_a_holder_records_reaches_the_next_holder_before_it_takes_over(object_store):
    """A killed build's engine job, recorded in its lease, is handed to whoever takes the expired lease over,
    before the lease is replaced (so before that build deletes what the killed one left)."""
    path = f'{object_store}/.lock'
    killed = leases.Lease(path, object_store, seconds=1.5, holder='killed:1')
    killed.acquire()
    job = {'engine': 'flink', 'rest': 'http://jobmanager:8081', 'name': 'ragsieve-r1-1'}
    killed.record(job)
    assert leases.read_body(object_writes.read_versioned(path)[0])['job'] == job
    killed._stop.set()  # as a killed holder: no renewal, no release
    killed._thread.join()
    time.sleep(1.6)
    handed = []

    def on_takeover(body):
        handed.append((body, leases.read_body(object_writes.read_versioned(path)[0])['holder']))

    with leases.held(path, object_store, seconds=30, on_takeover=on_takeover):
        pass
    assert [(b['holder'], b['job'], holder_then) for b, holder_then in handed] == [('killed:1', job, 'killed:1')]


def test_a_renewal_refused_marks_the_lease_lost(object_store):
    path = f'{object_store}/.lock'
    lease = leases.Lease(path, object_store, seconds=60)  # renewed here, not by its thread within the test
    lease.acquire()
    # Overwritten by a process that asks nothing (a conditional write could lose the race to a renewal).
    storage.write_bytes(path, leases.lease_body('thief:9', time.time() + 60, 60))
    assert not lease._renew()
    with pytest.raises(leases.Lost, match=f'the lease {path} on {object_store} was taken over'):
        lease.check()
    lease.release()
    assert leases.read_body(object_writes.read_versioned(path)[0])['holder'] == 'thief:9'  # not deleted: not ours


class Clock:
    """A monotonic clock a test moves: a holder's pause, without waiting for it."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_holder_paused_past_its_lease_finds_it_lost_by_its_own_clock(object_store):
    path, clock = f'{object_store}/.lock', Clock()
    lease = leases.Lease(path, object_store, seconds=60, clock=clock)  # no background renewal within the test
    lease.acquire()
    clock.now += lease.safe_seconds - 1
    lease.fence()  # renewed: ours for safe_seconds from now
    clock.now += lease.safe_seconds - 1
    lease.check()
    clock.now += 1  # as a process stopped with SIGSTOP, or cut off from the store, past its lease less the margin
    with pytest.raises(leases.Lost, match=rf'^the lease {path} on {object_store} was lost: no renewal succeeded '
                                          r'for 45 s .+nothing was published$'):
        lease.check()
    # Lost is lost: the store would still take a renewal (no one came), but the holder does not ask.
    with pytest.raises(leases.Lost):
        lease.fence()
    lease.release()  # left to expire: another build may hold it by now
    assert leases.read_body(object_writes.read_versioned(path)[0])['token'] == lease.token


def test_a_lost_answer_to_the_taking_write_is_resolved_by_reading_the_lease_back(object_store, request,
                                                                               monkeypatch):
    server = request.getfixturevalue('minio' if object_store.startswith('s3') else 'fake_gcs')
    path = f'{object_store}/.lock'
    with fault_proxy(server, monkeypatch) as proxy:
        method = 'PUT' if object_store.startswith('s3') else 'POST'
        proxy.lose_answer(method, '/.lock')  # the store creates it; the client retries and is refused
        lease = leases.Lease(path, object_store, seconds=60)
        lease.acquire()  # not "held by" itself
        assert [a for _, _, a in proxy.seen].count('lose_answer') == 1
        proxy.lose_answer(method, '/.lock')  # a renewal applied, its answer lost: ours still, not "taken over"
        assert lease._renew()
        lease.check()
        lease.release()
        assert object_writes.read_versioned(path) is None


def test_a_lease_in_a_missing_bucket_says_the_bucket_is_missing(object_store):
    scheme = object_store.split('://')[0]
    with pytest.raises(object_writes.MissingBucket,
                       match=rf"^the bucket 'no-such-bucket' of {scheme}://no-such-bucket/x/.lock does not exist"):
        leases.Lease(f'{scheme}://no-such-bucket/x/.lock', f'{scheme}://no-such-bucket/x').acquire()
