"""The run is checked before the store is touched: parts, ids and vector values against the manifest."""

import shutil

import pytest

from tests.helpers import edited_run, run_digests, store_digests, sync_into, with_values
from transforms.sync.run_check import checked_run


def test_a_whole_run_passes_with_its_parts_counted(synced_runs):
    _, r1, _ = synced_runs
    run = checked_run(str(r1))
    assert run.run_id == 'r1' and sum(run.part_rows) == run.rows == len(run_digests(r1))


@pytest.mark.parametrize('edit, follows, problem', [
    (lambda part, shard: part.slice(0, 1) if shard == 0 else part, False,
     r'its \d+ parts hold \d+ rows, its manifest counts \d+ \(chunks/ changed after the build\)'),
    (lambda part, shard: with_values(part, 'chunk_id', {1: part.column('chunk_id')[0].as_py()}), True,
     "holds chunk_id '.*' twice"),
    (lambda part, shard: with_values(part, 'chunk_id', {0: None}), True, 'holds a row without a chunk_id'),
    (lambda part, shard: part.drop_columns(['text']), True, r"has no column\(s\) \['text'\]"),
    (lambda part, shard: with_values(part, 'embedding', {0: [0.5] * 3}), True, r'vector values for \d+ rows, not 384'),
])
def test_a_damaged_run_is_one_line_and_the_store_untouched(store_uri, synced_runs, tmp_path, edit, follows, problem):
    _, r1, _ = synced_runs
    sync_into(store_uri, r1)
    before = store_digests(store_uri)
    damaged = edited_run(r1, tmp_path / 'damaged', edit, manifest_follows=follows)
    with pytest.raises(ValueError, match=r'run damaged \(.*\) cannot be synced: .*' + problem) as refused:
        checked_run(str(damaged))
    assert str(refused.value).endswith('the store was not touched') and '\n' not in str(refused.value)
    assert store_digests(store_uri) == before


def test_a_missing_part_is_one_line(synced_runs, tmp_path):
    _, r1, _ = synced_runs
    shutil.copytree(r1, tmp_path / 'r1')
    next((tmp_path / 'r1' / 'chunks').glob('part-*')).unlink()
    with pytest.raises(ValueError, match=r'cannot be synced: .*(holds no part|does not hold exactly the parts)'):
        checked_run(str(tmp_path / 'r1'))
