"""PostgreSQL + pgvector, a real server: quoted names, the advisory lock, reconnecting retries, what --verify leaves."""

import logging
import os
import signal
import subprocess
import sys

import psycopg
import pytest

from tests.helpers import REPO, drift_of, run_digests, store_digests, sync_into
from transforms.sync import sync
from transforms.sync.run_check import checked_run
from transforms.sync.store import LockHeld, LockLost, StoreError, open_store

HOLD = ('import sys, time\n'
        'from transforms.sync.store import open_store\n'
        'store = open_store(sys.argv[1])\n'
        'with store.lock(0, "run r9"):\n'
        '    print("held", flush=True)\n'
        '    time.sleep(120)\n')


def execute(uri, *statements):
    with psycopg.connect(uri.split('?')[0], autocommit=True) as conn:
        return [conn.execute(s).fetchall() if s.lstrip().upper().startswith('SELECT') else conn.execute(s)
                for s in statements]


def catalog(uri):
    """What the database holds besides rows: relations, extensions, advisory locks."""
    return execute(uri, "SELECT relname, relkind FROM pg_class WHERE relnamespace = 'public'::regnamespace "
                        'ORDER BY relname', 'SELECT extname FROM pg_extension ORDER BY extname',
                   "SELECT objid FROM pg_locks WHERE locktype = 'advisory'")


@pytest.mark.parametrize('table', ['select', '123abc', 'Mixed_Case'])
def test_any_valid_table_name_works(postgres_uri, synced_runs, table):
    _, r1, _ = synced_runs
    uri = f'{postgres_uri}?table={table}'
    assert sync_into(uri, r1).upserted == len(run_digests(r1))
    assert drift_of(uri, r1).none and store_digests(uri) == run_digests(r1)
    assert execute(uri, f'SELECT count(*) FROM "{table}"')[0] == [(len(run_digests(r1)),)]


def test_verify_writes_nothing(postgres_uri, synced_runs):
    _, r1, _ = synced_runs
    execute(postgres_uri, 'DROP DATABASE IF EXISTS empty_db', 'CREATE DATABASE empty_db')
    empty = postgres_uri.rsplit('/', 1)[0] + '/empty_db'
    before = catalog(empty)
    assert drift_of(empty, r1).missing  # no table yet: everything is missing...
    assert catalog(empty) == before  # ...and neither the extension, the table nor its marker was made
    synced = f'{postgres_uri}?table=t_verified'
    sync_into(synced, r1)
    before = catalog(synced), execute(synced, 'SELECT n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables '
                                              "WHERE relname LIKE 't_verified%' ORDER BY relname")
    assert drift_of(synced, r1).none
    assert (catalog(synced), execute(synced, 'SELECT n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables '
                                             "WHERE relname LIKE 't_verified%' ORDER BY relname")) == before


def test_a_select_only_user_verifies_and_syncs_what_needs_no_write(postgres_uri, synced_runs, monkeypatch):
    _, r1, r2 = synced_runs
    uri = f'{postgres_uri}?table=t_readonly'
    sync_into(uri, r1)
    execute(uri, 'DROP ROLE IF EXISTS reader', 'CREATE ROLE reader LOGIN',
            'GRANT SELECT ON t_readonly, t_readonly_sync TO reader')
    reader = uri.replace('postgres@', 'reader@')
    assert drift_of(reader, r1).none and sync_into(reader, r1).upserted == 0
    monkeypatch.setattr(sync, 'BACKOFF_SECONDS', (0.0, 0.0))
    with pytest.raises(sync.SyncError, match=r'failed after 3 attempts \(InsufficientPrivilege: permission denied'):
        sync_into(reader, r2)


@pytest.mark.parametrize('ddl, problem', [
    ('ALTER TABLE {t} DROP COLUMN kind', r"lacks \['kind'\]"),
    ('ALTER TABLE {t} ADD COLUMN note text', r"has \['note'\] besides"),
    ('ALTER TABLE {t} DROP CONSTRAINT {t}_pkey', 'has no primary key'),
    ('DROP TABLE {t}_sync; CREATE TABLE {t}_sync (id int, note text)', 'is not a ragsieve marker'),
    ('DROP TABLE {t}; CREATE TABLE {t} (chunk_id text PRIMARY KEY, doc_id text, text text, embedding vector(3), '
     'metadata text, kind text, salience real, run_id text, row_hash text)', 'embedding is vector.3., not vector.384.'),
])
def test_a_table_of_another_schema_is_one_line_saying_what_to_do(postgres_uri, synced_runs, ddl, problem):
    _, r1, _ = synced_runs
    uri = f'{postgres_uri}?table=t_foreign'
    execute(uri, 'DROP TABLE IF EXISTS t_foreign', 'DROP TABLE IF EXISTS t_foreign_sync')
    sync_into(uri, r1)
    execute(uri, *ddl.format(t='t_foreign').split('; '))
    for verify in (True, False):
        with pytest.raises(StoreError, match=problem) as refused:
            sync_into(uri, r1, verify=verify)
        assert 'drop it' in str(refused.value) or 'add one' in str(refused.value)


def test_the_advisory_lock_refuses_waits_and_dies_with_its_holder(postgres_uri, synced_runs):
    uri = f'{postgres_uri}?table=t_locked'
    first, second = open_store(uri), open_store(uri)
    with first.lock(0, 'run r1'):
        with pytest.raises(LockHeld, match=r'is being synced by pid \d+ \(server\) on host 127\.0\.0\.1 since .*'
                                           r'\(ragsieve sync pid \d+ on .*\)'):
            with second.lock(0.2, 'run r2'):
                pass
    with second.lock(0, 'run r2'):  # released
        pass
    holder = subprocess.Popen([sys.executable, '-c', HOLD, uri], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, 'PYTHONPATH': str(REPO)})
    assert holder.stdout.readline().strip() == 'held'
    with pytest.raises(LockHeld):
        with second.lock(0, 'run r2'):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with second.lock(30, 'run r2'):  # the server ends the killed client's session, and its lock
        pass
    first.close()
    second.close()


def killing_upsert(store, admin_uri, then=None):
    """`store.upsert`, its connection killed by the server once, before its first attempt."""
    real = store.upsert
    killed = []

    def upsert(table):
        if not killed:
            killed.append(store._conn.info.backend_pid)
            execute(admin_uri, f'SELECT pg_terminate_backend({killed[0]}, 10000)')  # waits for it to end
            if then:
                then()
        return real(table)

    store.upsert = upsert
    return killed


def test_a_lost_connection_is_reopened_and_its_lock_retaken(postgres_uri, synced_runs, monkeypatch, caplog):
    _, r1, _ = synced_runs
    monkeypatch.setattr(sync, 'BACKOFF_SECONDS', (0.0, 0.0))
    uri = f'{postgres_uri}?table=t_reconnect'.replace('postgres@', 'postgres:pw-s3cret@')  # trust: any password
    store = open_store(uri)
    killed = killing_upsert(store, postgres_uri)
    with caplog.at_level(logging.WARNING, logger='ragsieve.sync'), store.lock(0, 'run r1'):
        report = sync.sync_run(store, checked_run(str(r1)))
        assert store._conn.info.backend_pid != killed[0]
        holders = execute(postgres_uri, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted")
        assert holders == [[(store._conn.info.backend_pid,)]]
    store.close()
    assert report.upserted == len(run_digests(r1)) and store_digests(uri) == run_digests(r1)
    assert 'upsert failed' in caplog.text and 'retrying' in caplog.text and 'pw-s3cret' not in caplog.text


def test_a_sync_that_lost_its_lock_to_another_stops(postgres_uri, synced_runs, monkeypatch):
    _, r1, _ = synced_runs
    monkeypatch.setattr(sync, 'BACKOFF_SECONDS', (0.0, 0.0))
    uri = f'{postgres_uri}?table=t_stolen'
    store, thief = open_store(uri), open_store(uri)
    stolen = thief.lock(10, 'run r2')  # taken while the sync's connection is down
    killing_upsert(store, postgres_uri, then=stolen.__enter__)
    with store.lock(0, 'run r1'):
        with pytest.raises(sync.SyncError, match='another sync took the lock meanwhile'):
            sync.sync_run(store, checked_run(str(r1)))
    stolen.__exit__(None, None, None)
    thief.close()
    store.close()


def test_a_large_change_is_analyzed(postgres_uri, synced_runs):
    _, r1, r2 = synced_runs
    uri = f'{postgres_uri}?table=t_analyzed'
    sync_into(uri, r1)
    analyzed = execute(uri, "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 't_analyzed'")[0]
    assert analyzed == [(1,)]
    assert sync_into(uri, r1).upserted == 0  # nothing changed: no ANALYZE
    assert execute(uri, "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 't_analyzed'")[0] == analyzed


def test_a_write_is_conditional_on_the_marker_row_the_sync_read(postgres_uri, synced_runs):
    _, r1, r2 = synced_runs
    uri = f'{postgres_uri}?table=t_fenced'
    sync_into(uri, r2)
    store = open_store(uri)
    store.prepare(384, create=True)
    execute(uri, 'UPDATE t_fenced_sync SET marker = marker')  # another sync wrote the same marker again
    left = store_digests(uri)
    try:
        with pytest.raises(LockLost, match=r"the marker's row is at version \d+, not at version \d+ as this sync "
                                           'last read or wrote it: another sync wrote the store'):
            store.delete(list(left)[:1])
        with pytest.raises(LockLost):
            store.write_marker({'run_id': 'r1'})
    finally:
        store.close()
    assert store_digests(uri) == left and drift_of(uri, r2).none


def test_a_connection_that_no_longer_holds_the_lock_commits_nothing(postgres_uri, synced_runs):
    _, r1, _ = synced_runs
    uri = f'{postgres_uri}?table=t_unheld'
    sync_into(uri, r1)
    left = store_digests(uri)
    store = open_store(uri)
    with store.lock(0, 'run r1'):
        store.prepare(384, create=True)
        # What a transaction pooler does when it runs the next transaction on another server connection.
        with store._conn.transaction():
            store._conn.execute('SELECT pg_advisory_unlock_all()')
        with pytest.raises(LockLost, match='this connection no longer holds the sync lock'):
            store.delete(list(left)[:1])
    store.close()
    assert store_digests(uri) == left
