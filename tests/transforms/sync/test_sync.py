"""A sync makes a real store (LanceDB, PostgreSQL + pgvector, Milvus Lite) hold exactly a run's rows, from any state."""

import numpy as np
import pyarrow as pa
import pytest

from tests.helpers import (drift_of, edited_run, resharded, run_digests, store_digests, store_rows, sync_into,
                           with_values)
from transforms.sync import rows, sync
from transforms.sync.run_check import checked_run
from transforms.sync.store import open_store


def opened(uri):
    store = open_store(uri)
    store.prepare(384, create=True)
    return store


def test_first_sync_then_nothing_to_do(store_uri, synced_runs):
    _, r1, _ = synced_runs
    first = sync_into(store_uri, r1)
    assert (first.upserted, first.deleted, first.unchanged) == (len(run_digests(r1)), 0, 0)
    assert store_digests(store_uri) == run_digests(r1)  # ids, content hashes and vector bytes
    again = sync_into(store_uri, r1)
    assert (again.upserted, again.deleted, again.unchanged) == (0, 0, len(run_digests(r1))) and again.drift.none


def test_a_nightly_sync_writes_only_what_changed(store_uri, synced_runs):
    _, r1, r2 = synced_runs
    sync_into(store_uri, r1)
    old, new = run_digests(r1), run_digests(r2)
    report = sync_into(store_uri, r2, batch_rows=2)
    changed = {c for c in new if old.get(c) != new[c]}
    assert report.upserted == len(changed) and report.deleted == len(old.keys() - new.keys()) > 0
    assert report.unchanged == len(new) - len(changed) > 0
    assert store_digests(store_uri) == new


def test_runs_of_many_parts_sync_their_vectors_bit_for_bit(store_uri, synced_runs, tmp_path):
    _, r1, r2 = synced_runs
    many = [resharded(run, tmp_path / run.name, 4) for run in (r1, r2)]  # with their Flat index
    sync_into(store_uri, many[0], batch_rows=7)
    assert store_digests(store_uri) == run_digests(many[0])
    nightly = sync_into(store_uri, many[1], batch_rows=7)
    assert nightly.unchanged and store_digests(store_uri) == run_digests(many[1]) == run_digests(r2)


def test_an_edited_store_is_found_by_verify_and_repaired_by_a_deep_sync(store_uri, synced_runs):
    _, r1, _ = synced_runs
    sync_into(store_uri, r1)
    expected = run_digests(r1)
    store = opened(store_uri)
    one, two = sorted(expected)[:2]
    edited = pa.concat_tables(list(store.scan(rows.COLUMNS, 100)))
    edited = edited.filter(pa.compute.equal(edited.column('chunk_id'), two))
    edited = edited.set_column(edited.schema.get_field_index('text'), 'text', pa.array(['edited by hand']))
    store.upsert(edited)  # the text changed, its row_hash column did not
    store.delete([one])
    foreign = edited.set_column(0, 'chunk_id', pa.array(['not-from-ragsieve#0']))
    store.upsert(foreign)
    store.close()

    drift = drift_of(store_uri, r1)
    assert (drift.missing, drift.stale, drift.extra) == ([one], [two], ['not-from-ragsieve#0'])
    assert store_digests(store_uri) != expected  # verify wrote nothing
    # A plain sync trusts row hashes: it restores the deleted row and drops the foreign one...
    plain = sync_into(store_uri, r1)
    assert (plain.upserted, plain.deleted) == (1, 1)
    # ...and a deep one also the row whose text was edited under an unchanged row_hash.
    repaired = sync_into(store_uri, r1, deep=True)
    assert (repaired.upserted, repaired.deleted) == (1, 0) and store_digests(store_uri) == expected


def test_store_search_finds_ragsieve_dense_top_5(store_uri, synced_runs, embedding_model):
    import faiss

    from transforms.features.embedding import embed_texts
    from transforms.output import tables

    _, r1, _ = synced_runs
    sync_into(store_uri, r1)
    ids = tables.read_table(str(r1 / 'chunks'), ['chunk_id']).column('chunk_id').to_pylist()
    index = faiss.read_index(str(r1 / 'index' / 'index.faiss'))
    store = opened(store_uri)
    questions = ['How long does sourdough need to rise?', 'How do I fix a flat tyre?', 'When was the town founded?']
    for question, vector in zip(questions, embed_texts(embedding_model, questions)):
        _, positions = index.search(vector[None, :], 5)
        assert store.search(vector, 5) == [ids[p] for p in positions[0]], question
    store.close()


def test_a_failing_batch_stops_the_sync_and_keeps_the_marker(postgres_uri, synced_runs, monkeypatch):
    import psycopg

    _, r1, r2 = synced_runs
    uri = f'{postgres_uri}?table=t_failing'
    sync_into(uri, r1)
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        # The server refuses the new document's rows, as a real constraint or trigger would.
        conn.execute("ALTER TABLE t_failing ADD CONSTRAINT no_planets CHECK (doc_id <> 'planets.md')")
    monkeypatch.setattr(sync, 'BACKOFF_SECONDS', (0.0, 0.0))
    with pytest.raises(sync.SyncError, match=r'upsert of \d+ rows failed after 3 attempts .*planets\.md#0'):
        sync_into(uri, r2, batch_rows=1)
    store = opened(uri)
    assert store.read_marker()['run_id'] == 'r1'
    store.close()


def test_attempt_retries_then_reports_the_ids():
    # The subject is the retry loop, not a store: a callable that fails twice stands in for one.
    calls, waits = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError('reset by peer')
        return 'written'

    assert sync.attempt('upsert', flaky, lambda: ['a#0'], sleep=waits.append) == 'written'
    assert len(calls) == 3 and waits == list(sync.BACKOFF_SECONDS)
    with pytest.raises(sync.SyncError, match=r"upsert of 1 rows failed after 3 attempts \(OSError: disk\): a#0"):
        sync.attempt('upsert', lambda: (_ for _ in ()).throw(OSError('disk')), lambda: ['a#0'], sleep=waits.append)


def test_attempt_retries_a_recovery_that_failed_but_stops_on_a_lost_lock():
    # The subject is the retry loop: a store whose server is not back on the first retry stands in for one.
    from transforms.sync.store import LockLost

    class Store:
        recoveries = 0

        def redact(self, text):
            return text.replace('hunter2', '***')

        def recover(self):
            self.recoveries += 1
            if self.recoveries == 1:
                raise ConnectionError('server hunter2 still starting')

        def check_lock(self):
            pass

    store, calls = Store(), []

    def write():
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError('connection lost')
        return 'written'

    assert sync.attempt('upsert', write, store=store, sleep=lambda s: None) == 'written'
    assert (len(calls), store.recoveries) == (2, 2)
    store.recover = lambda: (_ for _ in ()).throw(LockLost('another sync took the lock'))
    with pytest.raises(sync.SyncError, match=r'after 1 attempts \(LockLost: another sync took the lock\)'):
        sync.attempt('upsert', lambda: (_ for _ in ()).throw(OSError('lost')), store=store, sleep=lambda s: None)


def test_attempt_stops_before_the_call_once_the_lock_file_is_lost():
    from transforms.sync.store import LockLost

    class Store:
        def redact(self, text):
            return text

        def check_lock(self):
            raise LockLost('lancedb:///x: lock file /x/t.sync-lock was deleted or replaced while held')

    calls = []
    with pytest.raises(sync.SyncError, match=r'LockLost: lancedb:///x: lock file .* deleted or replaced'):
        sync.attempt('marker', lambda: calls.append(1), store=Store(), sleep=lambda s: None)
    assert calls == []  # nothing written once another sync may hold the store


def test_a_failure_line_is_bounded_and_escapes_ids():
    huge = ['\x1b[31m\n' + 'x' * 100_000] * 3 + [f'id#{i}' for i in range(1000)]
    line = str(sync.SyncError('upsert', huge, OSError('a\nsecond line ' + 'y' * 10_000)))
    assert len(line) < 1000 and '\n' not in line and '\x1b' not in line
    assert line.count('\\x1b[31m\\nxxx') == 3 and '(100006 characters)' in line and 'and 998 more' in line


def test_row_hashes_cover_every_field_and_what_made_the_vectors():
    base = ('c#0', 'c', 'text', None, 'chunk', None, 'model+probe')
    digest = rows.row_hash(*base)
    for i, other in enumerate(['c#1', 'd', 'text!', '', 'delta', 0.5, 'other model']):
        changed = list(base)
        changed[i] = other
        assert rows.row_hash(*changed) != digest, i
    content = ('c#0', 'c', 'text', np.ones(4, np.float32), None, 'chunk', None)
    assert rows.content_digest(*content) != rows.content_digest(*content[:3], np.full(4, 2, np.float32), *content[4:])


def test_a_store_complete_but_unmarked_gets_its_marker(store_uri, synced_runs):
    _, r1, _ = synced_runs
    store = open_store(store_uri)

    def killed(marker):
        raise RuntimeError('killed before the marker was written')

    store.write_marker = killed
    with pytest.raises(sync.SyncError, match='killed'):
        sync.sync_run(store, checked_run(str(r1)))
    store.close()
    again = sync_into(store_uri, r1)
    assert (again.upserted, again.deleted, again.drift.marker) == (0, 0, sync.NO_MARKER)
    store = opened(store_uri)
    assert store.read_marker()['run_id'] == 'r1' and drift_of(store_uri, r1).none
    store.close()


@pytest.mark.parametrize('marker', [[1, 2], 'a string', {'run': 'r1'}, {'run_id': 7}])
def test_a_marker_that_is_not_ragsieves_is_drift_and_repaired(store_uri, synced_runs, marker):
    _, r1, _ = synced_runs
    sync_into(store_uri, r1)
    store = opened(store_uri)
    store.write_marker(marker)  # what another program could have left there
    store.close()
    drift = drift_of(store_uri, r1)
    assert drift.marker.startswith(sync.FOREIGN_MARKER) and "is not ragsieve's" in drift.line('r1')
    repaired = sync_into(store_uri, r1)
    assert (repaired.upserted, repaired.deleted) == (0, 0) and drift_of(store_uri, r1).none


def test_rows_a_store_cannot_hold_are_rejected_one_by_one(store_uri, synced_runs, tmp_path):
    _, r1, _ = synced_runs
    # What a build accepts from JSONL records: a NUL in a text and an id, an id of 100,000 characters.
    odd = {0: 'nul\x00in text'}
    run = edited_run(r1, tmp_path / 'odd', lambda part, shard: part if shard else with_values(
        with_values(part, 'text', odd), 'chunk_id', {1: part.column('chunk_id')[1].as_py() + '\x00', 2: 'i' * 100_000}))
    ids = run_digests(run)
    report = sync_into(store_uri, run, batch_rows=1000)
    rejected = dict(report.rejected)
    # PostgreSQL text holds no NUL and its key index no 100,000 bytes; Milvus's VARCHAR stops at 65,535.
    expected = {'lancedb': 0, 'pgvector': 3, 'milvus': 1}[store_uri.split('://')[0].replace('postgresql', 'pgvector')]
    assert len(rejected) == expected, rejected
    assert all('NUL character' in why or 'bytes, over' in why for why in rejected.values())
    # Every other row landed, the innocent ones of the same batch included.
    held = store_rows(store_uri)
    assert set(held.column('chunk_id').to_pylist()) == set(ids) - set(rejected)
    assert report.upserted == len(ids) - len(rejected) and held.num_rows == report.upserted
    # Rejected rows are not drift: the store holds what it can of the run, and says so again next time.
    again = sync_into(store_uri, run)
    assert (again.upserted, again.deleted, len(again.rejected)) == (0, 0, expected) and again.drift.none
