"""The sync job end to end: its last line and exit codes, kills at every step, `build --sync`."""

import os
import subprocess
import sys

import pytest

from pipelines import build_index, cli
from pipelines import sync as sync_job
from tests.helpers import REPO, drift_of
from transforms.output import publish
from transforms.sync import rows

# Upserts and deletes come in batches of 2, so a kill can fall between two of each.
BATCH = ('--batch_rows', '2')
KILL_POINTS = ('sync_prepared', 'sync_upserted_0', 'sync_upserted_2', 'sync_deleted_0', 'sync_deleted_1',
               'sync_marked')


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


def test_build_syncs_what_it_published(tmp_path, capsys):
    uri = f'lancedb://{tmp_path}/lance'
    root = tmp_path / 'index'
    build_index.run(['--input', str(REPO / 'sample_corpus'), '--output', str(root), '--chunk_size', '64',
                     '--versioned', '--run_id', 'r1', '--sync', uri])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('upserted ')
    assert drift_of(uri, root / 'runs' / 'r1').none
    with pytest.raises(ValueError, match='unknown store'):
        build_index.run(['--input', str(REPO / 'sample_corpus'), '--output', str(tmp_path / 'x'), '--sync', 'nope://x'])
