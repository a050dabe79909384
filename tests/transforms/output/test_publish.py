"""Publishing a plain index: an index caught between the two renames is put back; on object stores, replaced whole."""

import json

from transforms import storage
from transforms.output import publish


def test_clean_staging_puts_back_an_index_caught_between_the_two_renames(tmp_path):
    out = tmp_path / 'out'
    old = tmp_path / 'out.staging-1-2.old'  # the previous index, moved aside by publish
    old.mkdir()
    (old / 'manifest.json').write_text(json.dumps({'run_id': 'previous'}))
    (tmp_path / 'out.staging-1-2').mkdir()  # the new one, not yet renamed
    assert publish.clean_staging(str(out)) == [str(tmp_path / 'out.staging-1-2')]
    assert json.loads((out / 'manifest.json').read_text()) == {'run_id': 'previous'}


# --- on object stores (real MinIO and fake-gcs-server) -------------------------------------------------------


def test_a_remote_publish_replaces_the_index_whole_and_leaves_no_staging(object_store):
    output = f'{object_store}/index'
    for name in ('chunks/part-00000-of-00002.parquet', 'chunks/part-00001-of-00002.parquet', 'manifest.json'):
        storage.write_bytes(f'{output}/{name}', b'old')
    staging = publish.staging_path(output)
    for name in ('chunks/part-00000-of-00001.parquet', 'manifest.json'):
        storage.write_bytes(f'{staging}/{name}', b'new')
    publish.publish(staging, output)
    assert {f.path[len(output) + 1 :]: storage.read_bytes(f.path) for f in storage.list_files(output)} == {
        'chunks/part-00000-of-00001.parquet': b'new', 'manifest.json': b'new'}
    assert storage.list_files(staging) == []


def test_a_remote_publish_killed_midway_is_finished_by_the_next_build(object_store):
    output = f'{object_store}/index'
    storage.write_bytes(f'{output}/chunks/part-00000-of-00002.parquet', b'old')  # the old manifest already gone
    staging = publish.staging_path(output)
    storage.write_bytes(f'{staging}/chunks/part-00000-of-00001.parquet', b'new')
    storage.write_bytes(f'{staging}/manifest.json', b'new')
    storage.write_bytes(f'{output}/{publish.PUBLISHING_FILE}', f'{staging}\n'.encode())
    killed_build = f'{output}.staging-1-2'
    storage.write_bytes(f'{killed_build}/chunks/part-00000-of-00001.parquet', b'half')
    publish.check_replaceable(output)  # a publish in progress is ragsieve's own
    assert publish.clean_staging(output) == [killed_build]
    assert sorted(f.path[len(output) + 1 :] for f in storage.list_files(output)) == [
        'chunks/part-00000-of-00001.parquet', 'manifest.json']
    assert storage.list_files(staging) == [] and storage.list_files(killed_build) == []
