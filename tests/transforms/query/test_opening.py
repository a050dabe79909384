"""Opening an index on a real store: a run pruned mid-read is read again from LATEST whatever the error; a prefix
without an index, a missing or denied bucket are refused before anything is downloaded."""

import posixpath

import pytest

from tests.helpers import BUCKET, TWO_RECORDS, prune_while_read, records_index, upload
from transforms import storage
from transforms.query.retriever import Retriever

@pytest.fixture(scope='module')
def index_dir(tmp_path_factory):
    return records_index(tmp_path_factory.mktemp('opening'), TWO_RECORDS)


def versioned_root(url, index_dir, runs=('r1', 'r2'), latest='r1'):
    """A versioned root on the store holding copies of `index_dir` as `runs`; LATEST names `latest`."""
    for run_id in runs:
        upload(index_dir, f'{url}/runs/{run_id}')
    if latest:
        storage.write_bytes(f'{url}/LATEST', f'{latest}\n'.encode())
    return url


def test_a_run_pruned_while_it_is_downloaded_is_read_again_from_latest(object_store, index_dir, embedding_model,
                                                                       monkeypatch):
    root = versioned_root(object_store, index_dir)
    # A build publishes r2 and prunes r1 after this reader read LATEST and downloaded r1's first file.
    opened = prune_while_read(monkeypatch, root)
    retriever = Retriever(root, model=embedding_model)
    assert retriever.index == f'{root}/runs/r2'
    assert sum('/runs/r1/' in p for p in opened) == 2  # the second failed: it was gone
    assert retriever.search('How long do I cook pasta?', k=1).hits[0].doc_id == 'pasta'


def test_a_run_whose_latest_stays_is_not_read_twice(object_store, index_dir, embedding_model, monkeypatch):
    root = versioned_root(object_store, index_dir, runs=('r1',))
    storage.delete_files([f'{root}/runs/r1/index/ids.parquet'])  # damaged, not pruned: LATEST still names it
    with pytest.raises(ValueError, match=rf"^--index '{root}/runs/r1' is incomplete: missing index/ids.parquet$"):
        Retriever(root, model=embedding_model)


def objects_named(asked):
    """The names of the objects the requests `asked` read or looked for (a listing names none)."""
    named = set()
    for method, path in asked:
        path = path.split('?', 1)[0]
        if path.rstrip('/').endswith(('/o', f'/{BUCKET}')):
            continue  # a listing (GCS `.../b/BUCKET/o`, S3 `/BUCKET/`)
        named.add(posixpath.basename(path.replace('%2F', '/')))
    return named


@pytest.mark.parametrize('where', ['root without LATEST', 'whole bucket'])
def test_a_prefix_without_a_manifest_is_refused_after_reading_latest_and_the_manifest(proxied_store, index_dir,
                                                                                     where):
    url, proxy = proxied_store
    root = versioned_root(url, index_dir, latest=None)  # LATEST deleted: every run and a cache under it
    storage.write_bytes(f'{root}/cache/entry.json', b'{}\n')
    index = root if where == 'root without LATEST' else f'{url.split("://")[0]}://{BUCKET}'
    proxy.seen.clear()
    with pytest.raises(ValueError) as e:
        Retriever(index)
    assert str(e.value) == (f"--index '{index}' is not a ragsieve index: it holds no manifest.json, and no LATEST "
                            'naming a run')
    asked = proxy.asked()
    assert objects_named(asked) == {'LATEST', 'manifest.json'}, asked
    assert len(asked) == 3, asked  # the bucket's one-key listing, LATEST (looked for), manifest.json


def test_a_denied_bucket_is_refused_in_one_request(proxied_store, deny_bucket, index_dir):
    url, proxy = proxied_store
    root = versioned_root(url, index_dir, runs=('r1',))
    deny_bucket()
    proxy.seen.clear()
    with pytest.raises(ValueError, match=rf"^--index '{root}': access to bucket '{BUCKET}' is denied \("):
        Retriever(root)
    assert len(proxy.asked()) == 1
