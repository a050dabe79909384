"""The sync job end to end: its last line and exit codes, kills at every step, one writer at a time, `build --sync`."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines import cli
from pipelines import sync as sync_job
from pipelines.build_index import job as build_index
from pipelines.common import exits
from tests.helpers import REPO, drift_of, free_port, run_digests, store_digests, store_rows
from transforms.output import publish
from transforms.sync import locks, rows
from transforms.sync.lancedb_store import LOCK_SUFFIX
from transforms.sync.store import DEFAULT_TABLE, open_store

# Upserts and deletes come in batches of 2, so a kill can fall between two of each.
BATCH = ('--batch_rows', '2')
# Syncs started at once, alternating two runs: 4 in CI; issue 34's 10 (4 CI minutes more) with RAGSIEVE_CONCURRENT_SYNCS=10.
CONCURRENT_SYNCS = int(os.environ.get('RAGSIEVE_CONCURRENT_SYNCS', '4'))
KILL_POINTS = ('sync_prepared', 'sync_upserted_0', 'sync_upserted_2', 'sync_deleted_0', 'sync_deleted_1',
               'sync_marked')
# Where a paused sync is stopped: past its last check of the lock, before a write (an upsert into an empty
# table, the case; into a synced one; a delete; the marker). Its store's fence must keep that write out.
PAUSE_POINTS = (('sync_upserting_0', False), ('sync_upserting_1', True), ('sync_deleting_0', True),
                ('sync_marking', True))


def sync_cli(capsys, *argv):
    code = cli.main(['sync', *argv])
    out = capsys.readouterr()
    return code, out.out.strip().splitlines(), out.err


def test_last_line_counts_and_verify_exit_codes(store_uri, synced_runs, capsys):
    root, r1, r2 = synced_runs
    n1 = rows.Run.of(str(r1)).rows
    code, out, _ = sync_cli(capsys, '--index', str(r1), '--to', store_uri, '--no_progress')
    assert code == 0 and out[-1].startswith(f'upserted {n1}, deleted 0, unchanged 0 in ')
    code, out, err = sync_cli(capsys, '--index', str(root), '--to', store_uri, '--verify')
    assert code == sync_job.DRIFT and 'differs from run r2' in err and 'missing' in err and 'extra' in err
    code, out, _ = sync_cli(capsys, '--index', str(root), '--to', store_uri)
    assert code == 0 and ', unchanged ' in out[-1] and not out[-1].startswith('upserted 0, deleted 0')
    code, out, _ = sync_cli(capsys, '--index', str(root), '--to', store_uri, '--verify')
    assert code == 0 and out[-1] == f'no drift: {rows.Run.of(str(r2)).rows} rows of run r2'
    code, out, _ = sync_cli(capsys, '--index', str(root), '--to', store_uri)
    assert out[-1].startswith('upserted 0, deleted 0, unchanged ')


def test_log_progress_counts_the_rows_compared_and_written(store_uri, synced_runs, capsys, caplog):
    caplog.set_level(logging.INFO, logger='ragsieve.sync')
    _, r1, _ = synced_runs
    n1 = rows.Run.of(str(r1)).rows
    code, _, _ = sync_cli(capsys, '--index', str(r1), '--to', store_uri, '--progress', 'log')
    assert code == 0
    logged = [r.getMessage() for r in caplog.records if r.name == 'ragsieve.sync']
    assert any(re.fullmatch(rf'check run \(r1, {n1:,} rows\): \d+\.\d s', line) for line in logged), logged
    assert any(re.fullmatch(rf'done in \d+s: compare {n1:,}/{n1:,} rows(, [\d.,]+ rows/s)?; upsert {n1:,} rows; '
                            r'delete 0 rows', line) for line in logged), logged


def test_bad_store_uri_is_one_line(synced_runs, capsys):
    root, _, _ = synced_runs
    code, _, err = sync_cli(capsys, '--index', str(root), '--to', 'qdrant://localhost:6333')
    assert code == 2 and err.strip().startswith("ragsieve sync: error: 'qdrant://localhost:6333': unknown store")


@pytest.mark.parametrize('point', KILL_POINTS)
def test_a_sync_killed_anywhere_is_finished_by_the_next(durable_store_uri, synced_runs, point):
    store_uri = durable_store_uri
    root, r1, r2 = synced_runs
    assert sync_job.sync(str(r1), store_uri).upserted
    killed = subprocess.run([sys.executable, '-m', 'pipelines.sync', '--index', str(root), '--to', store_uri, *BATCH],
                            cwd=REPO, env={**os.environ, publish.KILL_AT_ENV: point}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    # Killed before the marker moved, r2 is not all there, or not marked: the drift says so.
    assert drift_of(store_uri, r2).none == (point == 'sync_marked')
    resumed = sync_job.sync(str(root), store_uri, batch_rows=2)
    assert drift_of(store_uri, r2).none, resumed
    if point == 'sync_marked':
        assert (resumed.upserted, resumed.deleted) == (0, 0)


def sync_command(store_uri: str, run) -> list:
    return [sys.executable, '-m', 'pipelines.cli', 'sync', '--to', store_uri, '--no_progress', '--index', str(run)]


def paused_sync(store_uri: str, run, point: str) -> subprocess.Popen:
    """A sync of `run` in batches of 2 that stopped itself (SIGSTOP) at `point`, once it is stopped (state T)."""
    process = subprocess.Popen([*sync_command(store_uri, run), *BATCH], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, publish.STOP_AT_ENV: point})
    while True:
        stat = Path(f'/proc/{process.pid}/stat').read_text()
        if stat[stat.rindex(')') + 2] == 'T':
            return process
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)


def take_the_lock_of(process, store_uri: str) -> None:
    """What loses a paused sync its lock: its lock file renamed away (LanceDB, Milvus Lite), its session ended
    (PostgreSQL)."""
    target = store_uri.split('://', 1)[1]
    if store_uri.startswith(('lancedb://', 'milvus://')):
        lock = Path(target + LOCK_SUFFIX) if target.endswith('.db') else Path(target) / f'{DEFAULT_TABLE}{LOCK_SUFFIX}'
        lock.rename(lock.with_name('renamed-away'))
        return
    import psycopg

    with psycopg.connect(store_uri.split('?')[0], autocommit=True) as conn:
        ended = conn.execute('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s',
                             (f'ragsieve sync pid {process.pid} on %',)).fetchall()
    assert ended == [(True,)]


def store_state(store_uri: str):
    """What a store holds: its rows' digests, how many rows (an id held twice counts twice), its marker."""
    store = open_store(store_uri)
    try:
        store.prepare(384, create=False)
        marker = store.read_marker()
    finally:
        store.close()
    return store_digests(store_uri), store_rows(store_uri).num_rows, marker


@pytest.mark.parametrize('point, synced', PAUSE_POINTS, ids=[p for p, _ in PAUSE_POINTS])
def test_a_sync_that_lost_its_lock_while_paused_lands_no_write(durable_store_uri, synced_runs, point, synced):
    """Sync A is paused (SIGSTOP) past its last check of the lock, loses the lock, and B syncs the store.

    Resumed, A must not land the write it was about to make: it stops with one line (exit 4), and the
    store is exactly what B left, rows and marker.
    """
    store_uri = durable_store_uri
    _, r1, r2 = synced_runs
    if synced:
        assert sync_job.sync(str(r2), store_uri).upserted
    paused = paused_sync(store_uri, r1, point)
    try:
        take_the_lock_of(paused, store_uri)
        newer = subprocess.run([*sync_command(store_uri, r2), '--wait', '60'], cwd=REPO, capture_output=True,
                               text=True)
        assert newer.returncode == 0, newer.stderr[-2000:]
        left = store_state(store_uri)
        assert left == (run_digests(r2), len(run_digests(r2)), left[2]) and left[2]['run_id'] == 'r2'
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    _, err = paused.communicate(timeout=120)
    assert store_state(store_uri) == left
    assert paused.returncode == exits.SYNC_FAILED, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f'ragsieve sync: {store_uri}: this sync lost its lock (') and 'Traceback' not in err
    assert last.endswith('; nothing was written after that, and the store is left to the sync that holds it now')


def test_a_paused_milvus_lite_sync_keeps_its_database_and_says_its_write_may_have_landed(tmp_path, synced_runs):
    """Milvus has no conditional write: the limit, as documented. Milvus Lite's own lock keeps a second sync out."""
    _, r1, r2 = synced_runs
    store_uri = f'milvus://{tmp_path}/milvus.db'
    # In a process of its own: Milvus Lite keeps a database open in the process that opened it.
    assert subprocess.run(sync_command(store_uri, r2), cwd=REPO, capture_output=True).returncode == 0
    paused = paused_sync(store_uri, r1, 'sync_upserting_1')
    try:
        take_the_lock_of(paused, store_uri)
        newer = subprocess.run(sync_command(store_uri, r2), cwd=REPO, capture_output=True, text=True)
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    assert newer.returncode == exits.FAILED and 'opens a database in one process at a time' in newer.stderr
    _, err = paused.communicate(timeout=120)
    assert paused.returncode == exits.SYNC_FAILED, err[-3000:]
    assert err.strip().splitlines()[-1].endswith('this store has no conditional write, so a write under way then '
                                                 'may have landed: sync again')
    assert sync_job.sync(str(r2), store_uri) and drift_of(store_uri, r2).none


def test_build_syncs_what_it_published(tmp_path, capsys):
    uri = f'lancedb://{tmp_path}/lance'
    root = tmp_path / 'index'
    build_index.run(['--input', str(REPO / 'sample_corpus'), '--output', str(root), '--chunk_size', '64',
                     '--versioned', '--run_id', 'r1', '--sync', uri])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('upserted ')
    assert drift_of(uri, root / 'runs' / 'r1').none
    with pytest.raises(ValueError, match='unknown store'):
        build_index.run(['--input', str(REPO / 'sample_corpus'), '--output', str(tmp_path / 'x'), '--sync', 'nope://x'])


def test_a_run_whose_files_are_not_its_builds_is_refused_before_the_store_is_written(synced_runs, tmp_path, capsys):
    import shutil

    _, r1, r2 = synced_runs
    run = tmp_path / 'r1'
    shutil.copytree(r1, run)
    shutil.rmtree(run / 'bm25')
    shutil.copytree(r2 / 'bm25', run / 'bm25')  # another build's BM25: it loads, and would be served
    uri = f'lancedb://{tmp_path}/lance'
    code, _, err = sync_cli(capsys, '--index', str(run), '--to', uri, '--no_progress')
    assert code == 2 and err.count('\n') == 1, err
    assert err.startswith(f'ragsieve sync: error: {run}/bm25/') and 'rebuild it' in err
    store = open_store(uri)
    try:
        assert store.read_marker() is None
    finally:
        store.close()


def test_a_second_sync_is_refused_naming_the_first_or_waits_for_it(store_uri, synced_runs, capsys, monkeypatch):
    _, r1, _ = synced_runs
    first = open_store(store_uri)
    held = first.lock(0, 'run r0')
    held.__enter__()
    code, out, err = sync_cli(capsys, '--index', str(r1), '--to', store_uri, '--no_progress')
    assert code == exits.FAILED and not out and len(err.strip().splitlines()) == 1
    assert err.startswith(f'ragsieve sync: error: {store_uri}') and 'is being synced by pid ' in err
    assert '(run r0)' in err or '(ragsieve sync pid ' in err  # a lock file, or PostgreSQL's application_name
    code, _, err = sync_cli(capsys, '--index', str(r1), '--to', store_uri, '--verify')
    assert code == sync_job.DRIFT and 'is being synced' not in err  # --verify takes no lock
    real, waits = locks.retry_until, []

    def retry_until(take, wait):
        def sleep(seconds):  # refused, the sync waits: the first one lets go now
            if not waits:
                held.__exit__(None, None, None)
            waits.append(seconds)
            time.sleep(seconds)
        return real(take, wait, sleep)

    monkeypatch.setattr(locks, 'retry_until', retry_until)
    code, out, _ = sync_cli(capsys, '--index', str(r1), '--to', store_uri, '--no_progress', '--wait', '60')
    assert code == 0 and out[-1].startswith('upserted ') and waits
    first.close()


@pytest.mark.parametrize('flags, problem', [
    (('--to', 'lancedb://'), 'names no directory'),
    (('--to', 'lancedb:///tmp/x?table='), r'\?table= must name one table'),
    (('--to', 'lancedb:///tmp/x', '--batch_rows', str(10 ** 9)), '--batch_rows must be 1 to 100000'),
    (('--to', 'lancedb:///tmp/x', '--wait', '-1'), '--wait must be >= 0'),
    (('--to', 'postgresql://app:hunter2@127.0.0.1:{port}/db'), 'cannot connect to postgresql://app:\\*\\*\\*@'),
])
def test_a_bad_store_or_flag_is_one_line(synced_runs, capsys, flags, problem):
    _, r1, _ = synced_runs
    flags = tuple(f.format(port=free_port()) for f in flags)
    code, out, err = sync_cli(capsys, '--index', str(r1), *flags)
    assert code == exits.FAILED and len(err.strip().splitlines()) == 1, err
    assert err.startswith('ragsieve sync: error: ') and 'hunter2' not in err
    assert __import__('re').search(problem, err), err


def test_a_password_is_in_no_line(postgres_uri, synced_runs, capsys):
    root, r1, _ = synced_runs
    uri = f'{postgres_uri}?table=t_secret'.replace('postgres@', 'postgres:hunter2@')  # trust takes any password
    printed = []
    for flags in ((), ('--verify',)):
        code, out, err = sync_cli(capsys, '--index', str(root), '--to', uri, *flags)
        printed += out + [err]
    code, out, err = sync_cli(capsys, '--index', str(r1), '--to', uri, '--verify')
    printed += out + [err]
    assert code == sync_job.DRIFT and 'postgres:***@' in err
    assert not [line for line in printed if 'hunter2' in line]


def test_build_with_a_failing_sync_exits_4_and_says_the_run_is_published(tmp_path, capsys):
    uri = f'postgresql://app:hunter2@127.0.0.1:{free_port()}/rag'  # no server there
    root = tmp_path / 'index'
    code = cli.main(['build', '--input', str(REPO / 'sample_corpus'), '--output', str(root), '--chunk_size', '64',
                     '--versioned', '--run_id', 'r1', '--sync', uri])
    captured = capsys.readouterr()
    assert code == exits.SYNC_FAILED == 4
    line = captured.err.strip().splitlines()[-1]
    assert line.startswith('ragsieve build: run r1 is published, but its sync into postgresql://app:***@127.0.0.1:')
    assert 'cannot connect' in line and 'hunter2' not in captured.err + captured.out
    assert (root / 'LATEST').read_text().strip() == 'r1'
    manifest = json.loads((root / 'runs' / 'r1' / 'manifest.json').read_text())
    assert manifest['config']['sync'] == uri.replace('hunter2', '***')
    assert 'hunter2' not in (root / 'runs' / 'r1' / 'report.html').read_text()


def test_concurrent_syncs_of_mixed_runs_write_one_at_a_time(store_uri, synced_runs, tmp_path):
    _, r1, r2 = synced_runs
    journal = tmp_path / 'journal'
    runs = [r1 if i % 2 else r2 for i in range(CONCURRENT_SYNCS)]
    command = ('import sys; from tests.helpers import journaled_sync; '
               'sys.exit(journaled_sync(sys.argv[1], sys.argv[2:]))')
    processes = [subprocess.Popen([sys.executable, '-c', command, str(journal), '--index', str(run), '--to', store_uri,
                                   '--wait', '600', '--no_progress'], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env={**os.environ, 'PYTHONPATH': str(REPO)})
                 for run in runs]
    results = [(p.pid, run, *p.communicate()) for p, run in zip(processes, runs)]
    for process, (_, _, out, err) in zip(processes, results):
        assert process.returncode == 0, err[-3000:]
        assert out.strip().splitlines()[-1].startswith('upserted ') and 'Traceback' not in err
    written = sorted((float(start), float(end), int(pid)) for pid, start, end in
                     (line.split() for line in journal.read_text().splitlines()))
    assert len(written) == CONCURRENT_SYNCS
    for (_, end, _), (start, _, _) in zip(written, written[1:]):
        assert end <= start  # exactly one wrote at a time
    last = {pid: run for pid, run, _, _ in results}[written[-1][2]]
    store = open_store(store_uri)
    store.prepare(384, create=False)
    assert store.read_marker()['run_id'] == last.name
    store.close()
    assert drift_of(store_uri, last).none and store_digests(store_uri) == run_digests(last)
