"""LanceDB, read back with its own client: duplicates and NULLs repaired, --verify writing nothing, versions bounded."""

import lancedb
import pyarrow as pa
import pytest

from tests.helpers import (drift_of, edited_run, run_digests, store_digests, store_rows, sync_into, tree_digest,
                           with_values)
from transforms.sync import rows
from transforms.sync.lancedb_store import LOCK_SUFFIX
from transforms.sync.store import LockLost, StoreError, open_store


def test_duplicated_and_null_rows_are_drift_and_repaired(tmp_path, synced_runs):
    _, r1, _ = synced_runs
    uri = f'lancedb://{tmp_path}/lance'
    # A table an earlier ragsieve made: ids and vectors nullable (a new one refuses NULLs there).
    table = lancedb.connect(str(tmp_path / 'lance')).create_table('ragsieve_chunks', schema=rows.store_schema(384))
    sync_into(uri, r1)
    table.checkout_latest()
    held = table.to_arrow()
    one, two, three = sorted(run_digests(r1))[:3]
    # Two concurrent syncs (before the lock) left an id twice; a hand-made row has no id; one lost its vector.
    table.add(held.filter(pa.compute.is_in(held.column('chunk_id'), pa.array([one, two]))))
    table.add(with_values(held.slice(0, 1), 'chunk_id', {0: None}))
    vectorless = held.filter(pa.compute.equal(held.column('chunk_id'), three))
    table.delete(f"chunk_id = '{three}'")
    table.add(vectorless.set_column(vectorless.schema.get_field_index('embedding'), 'embedding',
                                    pa.nulls(1, held.schema.field('embedding').type)))
    assert table.count_rows() == len(run_digests(r1)) + 3

    drift = drift_of(uri, r1)
    assert (drift.duplicates, drift.null_keys, drift.stale) == ([one, two], 1, [three])
    assert 'held more than once' in drift.line('r1') and '1 without a chunk_id' in drift.line('r1')
    repaired = sync_into(uri, r1)  # a plain sync: row hashes, and the store's own consistency
    assert repaired.upserted == 3 and drift_of(uri, r1).none
    ids = store_rows(uri).column('chunk_id').to_pylist()
    assert len(ids) == len(set(ids)) == len(run_digests(r1)) and store_digests(uri) == run_digests(r1)


def test_verify_writes_nothing(tmp_path, synced_runs):
    _, r1, r2 = synced_runs
    assert drift_of(f'lancedb://{tmp_path}/absent', r1).missing
    assert not (tmp_path / 'absent').exists()  # no directory, table or marker made
    uri = f'lancedb://{tmp_path}/lance'
    sync_into(uri, r1)
    before = tree_digest(tmp_path / 'lance')
    assert not drift_of(uri, r2).none and drift_of(uri, r1).none
    assert tree_digest(tmp_path / 'lance') == before


def test_versions_are_pruned_and_the_table_compacted(tmp_path, synced_runs):
    _, r1, r2 = synced_runs
    uri = f'lancedb://{tmp_path}/lance?keep_versions=6'
    sizes = []
    for i in range(10):
        sync_into(uri, r2 if i % 2 else r1, batch_rows=20)  # a commit per 20 rows: dozens of versions
        table = lancedb.connect(str(tmp_path / 'lance')).open_table('ragsieve_chunks')
        assert len(table.list_versions()) <= 6, i
        sizes.append(sum(p.stat().st_size for p in (tmp_path / 'lance').rglob('*') if p.is_file()))
    assert drift_of(uri.split('?')[0], r2).none and store_digests(uri) == run_digests(r2)
    assert max(sizes[4:]) < 1.25 * max(sizes[:4])  # bounded: it stops growing with every sync
    assert len(lancedb.connect(str(tmp_path / 'lance')).open_table('ragsieve_chunks_sync').list_versions()) <= 6


@pytest.mark.parametrize('made, problem', [
    (lambda db: db.create_table('ragsieve_chunks', schema=pa.schema([('chunk_id', pa.string()),
                                                                      ('embedding', pa.list_(pa.float32(), 3))])),
     r"lacks \['doc_id'"),
    (lambda db: db.create_table('ragsieve_chunks_sync', data=pa.table({'note': ['mine']})), 'not a ragsieve marker'),
])
def test_a_table_of_another_schema_is_one_line(tmp_path, synced_runs, made, problem):
    _, r1, _ = synced_runs
    made(lancedb.connect(str(tmp_path / 'lance')))
    for verify in (True, False):
        with pytest.raises(StoreError, match=problem):
            sync_into(f'lancedb://{tmp_path}/lance', r1, verify=verify)


def test_the_lock_file_lies_in_the_store(tmp_path, synced_runs):
    from pipelines import sync as sync_job

    _, r1, _ = synced_runs
    sync_job.sync(str(r1), f'lancedb://{tmp_path}/lance?table=mine')
    assert (tmp_path / 'lance' / f'mine{LOCK_SUFFIX}').exists()
    shortened = edited_run(r1, tmp_path / 'short', lambda part, shard: part.slice(1), manifest_follows=False)
    with pytest.raises(ValueError, match=r'its build wrote \d+|cannot be synced'):
        sync_job.sync(str(shortened), f'lancedb://{tmp_path}/fresh')
    assert not (tmp_path / 'fresh').exists()  # refused before the store was opened


@pytest.mark.parametrize('markers', [['not json {'], ['{"run_id": "r1"}', '{"run_id": "r1"}'], [None]])
def test_a_marker_table_of_odd_rows_is_drift_and_repaired(tmp_path, synced_runs, markers):
    _, r1, _ = synced_runs
    uri = f'lancedb://{tmp_path}/lance'
    sync_into(uri, r1)
    lancedb.connect(str(tmp_path / 'lance')).create_table(
        'ragsieve_chunks_sync', data=pa.table({'marker': pa.array(markers, pa.string())}), mode='overwrite')
    assert "is not ragsieve's" in drift_of(uri, r1).line('r1')
    assert sync_into(uri, r1).upserted == 0 and drift_of(uri, r1).none


def test_a_sync_whose_lock_file_is_deleted_stops_before_writing(tmp_path, synced_runs, monkeypatch):
    from pipelines import sync as sync_job
    from transforms.output import publish

    _, r1, _ = synced_runs
    lock = tmp_path / 'lance' / f'ragsieve_chunks{LOCK_SUFFIX}'

    def delete_the_lock(name):
        if name == 'sync_prepared':  # the table is open: a second sync could take a new lock file now
            lock.unlink()

    monkeypatch.setattr(publish, 'checkpoint', delete_the_lock)
    with pytest.raises(sync_job.SyncFailed, match='deleted or replaced while held') as failed:
        sync_job.sync(str(r1), f'lancedb://{tmp_path}/lance')
    assert '\n' not in str(failed.value)
    assert store_rows(f'lancedb://{tmp_path}/lance').num_rows == 0  # nothing written after the loss


def test_a_write_is_conditional_on_the_versions_the_sync_read(tmp_path, synced_runs):
    _, r1, r2 = synced_runs
    uri = f'lancedb://{tmp_path}/lance'
    sync_into(uri, r2)
    store = open_store(uri)
    store.prepare(384, create=True)  # reads at the table's and marker's versions now
    sync_into(uri, r1)  # another writer: Lance would rebase this store's next commit onto its versions
    left = store_rows(uri)
    try:
        with pytest.raises(LockLost, match=r"table 'ragsieve_chunks' is at version \d+, not at version \d+ as this "
                                           'sync last read or wrote it: another sync wrote the store'):
            store.delete(left.column('chunk_id').to_pylist()[:1])
        with pytest.raises(LockLost):
            store.write_marker({'run_id': 'r0'})
    finally:
        store.close()
    assert store_rows(uri).equals(left) and drift_of(uri, r1).none
