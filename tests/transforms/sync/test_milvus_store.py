"""Milvus Lite, a real database directory: synced again and again by new processes, quietly; --verify writes nothing."""

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, drift_of, run_digests, store_digests, tree_digest
from transforms.sync.store import StoreError, open_store


def sync_process(*argv):
    """`ragsieve sync ARGV` in a process of its own, as cron would start it."""
    return subprocess.run([sys.executable, '-m', 'pipelines.sync', '--no_progress', *argv], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, 'PYTHONPATH': str(REPO)})


def test_synced_a_second_and_third_time_without_a_traceback(tmp_path, synced_runs):
    root, r1, r2 = synced_runs
    uri = f'milvus://{tmp_path}/vectors.db'
    lines = []
    for run in (r1, r2, r1, r1):
        done = sync_process('--index', str(run), '--to', uri)
        assert done.returncode == 0, done.stderr[-3000:]
        assert 'Traceback' not in done.stderr and 'not implemented' not in done.stderr, done.stderr[-3000:]
        lines.append(done.stdout.strip().splitlines()[-1])
    assert lines[1].startswith('upserted ') and not lines[1].startswith('upserted 0, deleted 0')
    assert lines[3].startswith('upserted 0, deleted 0, unchanged ')
    assert drift_of(uri, r1).none and store_digests(uri) == run_digests(r1)


def test_verify_writes_nothing(tmp_path, synced_runs):
    _, r1, r2 = synced_runs
    assert drift_of(f'milvus://{tmp_path}/absent.db', r1).missing
    assert not (tmp_path / 'absent.db').exists()  # no database made
    uri = f'milvus://{tmp_path}/vectors.db'
    assert sync_process('--index', str(r1), '--to', uri).returncode == 0
    before = tree_digest(tmp_path / 'vectors.db')
    done = sync_process('--index', str(r2), '--to', uri, '--verify')
    assert done.returncode == 3 and 'differs from run r2' in done.stderr and 'Traceback' not in done.stderr
    assert tree_digest(tmp_path / 'vectors.db') == before


def test_a_database_open_elsewhere_is_one_line(tmp_path, synced_runs):
    _, r1, _ = synced_runs
    uri = f'milvus://{tmp_path}/vectors.db'
    holder = open_store(uri)
    holder.prepare(384, create=True)  # this process has it open
    done = sync_process('--index', str(r1), '--to', uri, '--verify')
    holder.close()
    assert done.returncode == 2 and 'Traceback' not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f'ragsieve sync: error: cannot open {uri}: ')
    assert 'one process at a time' in done.stderr


def test_a_collection_of_another_dimension_is_one_line(tmp_path, synced_runs):
    from pymilvus import DataType, MilvusClient

    _, r1, _ = synced_runs
    client = MilvusClient(str(tmp_path / 'vectors.db'))
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field('chunk_id', DataType.VARCHAR, max_length=64, is_primary=True)
    schema.add_field('embedding', DataType.FLOAT_VECTOR, dim=8)
    index = client.prepare_index_params()
    index.add_index('embedding', index_type='FLAT', metric_type='IP')
    client.create_collection('ragsieve_chunks', schema=schema, index_params=index)
    client.close()
    store = open_store(f'milvus://{tmp_path}/vectors.db')
    with pytest.raises(StoreError, match=r'8-dimensional vectors\); drop it or sync into another'):
        store.prepare(384, create=True)
    store.close()
