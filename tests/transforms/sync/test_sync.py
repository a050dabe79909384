"""A sync makes a real store (LanceDB, PostgreSQL + pgvector) hold exactly a run's rows, from any state."""

import numpy as np
import pyarrow as pa
import pytest

from transforms.output import tables
from transforms.sync import rows, sync
from transforms.sync.store import open_store


def digests(table):
    """`{chunk_id: digest of its fields and vector bytes}` of a table of rows."""
    return dict(zip(table.column('chunk_id').to_pylist(), rows.content_digests(table)))


def held(uri):
    """What the store holds, read back from it: ids, content and vector bits, as digests."""
    store = open_store(uri)
    store.prepare(384)
    table = pa.concat_tables(list(store.scan(rows.CONTENT_COLUMNS, 100)))
    store.close()
    return digests(table)


def of_run(run):
    """What a store must hold for `run`, from the run's chunks/."""
    return digests(tables.read_table(str(run / 'chunks'), rows.CONTENT_COLUMNS))


def run_sync(uri, run, **kwargs):
    store = open_store(uri)
    try:
        return sync.sync_run(store, str(run), **kwargs)
    finally:
        store.close()


def test_first_sync_then_nothing_to_do(store_uri, synced_runs):
    _, r1, _ = synced_runs
    first = run_sync(store_uri, r1)
    assert (first.upserted, first.deleted, first.unchanged) == (len(of_run(r1)), 0, 0)
    assert held(store_uri) == of_run(r1)  # ids, content hashes and vector bytes
    again = run_sync(store_uri, r1)
    assert (again.upserted, again.deleted, again.unchanged) == (0, 0, len(of_run(r1))) and again.drift.none


def test_a_nightly_sync_writes_only_what_changed(store_uri, synced_runs):
    _, r1, r2 = synced_runs
    run_sync(store_uri, r1)
    old, new = of_run(r1), of_run(r2)
    report = run_sync(store_uri, r2, batch_rows=2)
    changed = {c for c in new if old.get(c) != new[c]}
    assert report.upserted == len(changed) and report.deleted == len(old.keys() - new.keys()) > 0
    assert report.unchanged == len(new) - len(changed) > 0
    assert held(store_uri) == new


def test_an_edited_store_is_found_by_verify_and_repaired_by_a_deep_sync(store_uri, synced_runs):
    _, r1, _ = synced_runs
    run_sync(store_uri, r1)
    expected = of_run(r1)
    store = open_store(store_uri)
    store.prepare(384)
    one, two = sorted(expected)[:2]
    edited = pa.concat_tables(list(store.scan(rows.COLUMNS, 100)))
    edited = edited.filter(pa.compute.equal(edited.column('chunk_id'), two))
    edited = edited.set_column(edited.schema.get_field_index('text'), 'text', pa.array(['edited by hand']))
    store.upsert(edited)  # the text changed, its row_hash column did not
    store.delete([one])
    foreign = edited.set_column(0, 'chunk_id', pa.array(['not-from-ragsieve#0']))
    store.upsert(foreign)
    store.close()

    drift = run_sync(store_uri, r1, verify=True).drift
    assert (drift.missing, drift.stale, drift.extra) == ([one], [two], ['not-from-ragsieve#0'])
    assert held(store_uri) != expected  # verify wrote nothing
    # A plain sync trusts row hashes: it restores the deleted row and drops the foreign one...
    plain = run_sync(store_uri, r1)
    assert (plain.upserted, plain.deleted) == (1, 1)
    # ...and a deep one also the row whose text was edited under an unchanged row_hash.
    repaired = run_sync(store_uri, r1, deep=True)
    assert (repaired.upserted, repaired.deleted) == (1, 0) and held(store_uri) == expected


def test_store_search_finds_ragsieve_dense_top_5(store_uri, synced_runs, embedding_model):
    import faiss

    from transforms.features.embedding import embed_texts
    from transforms.output import tables

    _, r1, _ = synced_runs
    run_sync(store_uri, r1)
    ids = tables.read_table(str(r1 / 'chunks'), ['chunk_id']).column('chunk_id').to_pylist()
    index = faiss.read_index(str(r1 / 'index' / 'index.faiss'))
    store = open_store(store_uri)
    store.prepare(384)
    questions = ['How long does sourdough need to rise?', 'How do I fix a flat tyre?', 'When was the town founded?']
    for question, vector in zip(questions, embed_texts(embedding_model, questions)):
        _, positions = index.search(vector[None, :], 5)
        assert store.search(vector, 5) == [ids[p] for p in positions[0]], question
    store.close()


def test_a_failing_batch_stops_the_sync_and_keeps_the_marker(postgres_uri, synced_runs, monkeypatch):
    import psycopg

    _, r1, r2 = synced_runs
    uri = f'{postgres_uri}?table=t_failing'
    run_sync(uri, r1)
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        # The server refuses the new document's rows, as a real constraint or trigger would.
        conn.execute("ALTER TABLE t_failing ADD CONSTRAINT no_planets CHECK (doc_id <> 'planets.md')")
    monkeypatch.setattr(sync, 'BACKOFF_SECONDS', (0.0, 0.0))
    with pytest.raises(sync.SyncError, match=r'upsert of \d+ rows failed after 3 attempts .*planets\.md#0'):
        run_sync(uri, r2, batch_rows=1)
    store = open_store(uri)
    store.prepare(384)
    assert store.read_marker()['run_id'] == 'r1'
    store.close()


def test_attempt_retries_then_reports_the_ids():
    # The subject is the retry loop, not a store: a callable that fails twice stands in for one.
    calls, waits = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError('reset by peer')

    sync.attempt('upsert', flaky, lambda: ['a#0'], sleep=waits.append)
    assert len(calls) == 3 and waits == list(sync.BACKOFF_SECONDS)
    with pytest.raises(sync.SyncError, match=r"upsert of 1 rows failed after 3 attempts \(OSError: disk\): a#0"):
        sync.attempt('upsert', lambda: (_ for _ in ()).throw(OSError('disk')), lambda: ['a#0'], sleep=waits.append)


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
    with pytest.raises(RuntimeError, match='killed'):
        sync.sync_run(store, str(r1))
    store.close()
    again = run_sync(store_uri, r1)
    assert (again.upserted, again.deleted, again.drift.marker) == (0, 0, sync.NO_MARKER)
    store = open_store(store_uri)
    store.prepare(384)
    assert store.read_marker()['run_id'] == 'r1' and run_sync(store_uri, r1, verify=True).drift.none
    store.close()
