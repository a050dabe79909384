"""Builds on object storage: s3:// on a real MinIO, gs:// on fake-gcs-server, as on local disk.

The servers are real (engines/objectstores.py, `make objectstores`); the
store's settings reach the build as a user's would, through the
environment (AWS_*, STORAGE_EMULATOR_HOST). The local build of the same
corpus is `sample_root`'s run r1.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from pipelines.build_index import job as build_index
from pipelines import sync as sync_job
from engines.objectstores import MINIO_PASSWORD, MINIO_USER
from tests.helpers import (BUCKET, REPO, data_files, download, fault_proxy, objects_under, same_build, upload,
                           wait_stopped)
from transforms import storage
from transforms.output import snapshots
from transforms.output.publish import KILL_AT_ENV, STOP_AT_ENV
from transforms.query.retriever import Retriever
from transforms.storage import leases

FLAGS = ['--chunk_size', '64', '--progress', 'none']


@pytest.fixture
def s3_root(minio, monkeypatch, request):
    """A prefix of this test's own on MinIO, its settings in this process's environment (for S3-only tests)."""
    for key, value in minio.env.items():
        monkeypatch.setenv(key, value)
    storage.configure()
    return f's3://{BUCKET}/{request.node.name[:40]}-{os.getpid()}'


def wait_leases_expired(root: str) -> None:
    """Returns once every lease under `root` (the output's, the cache's) has expired by this machine's clock."""
    for lease in [f.path for f in storage.list_files(root) if f.path.endswith(f'/{snapshots.LOCK_FILE}')]:
        expires_at = leases.read_body(storage.read_bytes(lease))['expires_at']
        while time.time() <= expires_at:
            time.sleep(0.1)


def paused_build(root: str, run_id: str, *flags: str, stop_at: str = 'after_pipeline', server=None, proxy=None):
    """A versioned build of `root` in its own process, stopped by SIGSTOP at `stop_at`; with `proxy`, it reaches
    the store `server` through it."""
    env = {**os.environ, STOP_AT_ENV: stop_at}
    if proxy is not None:
        env.update({k: proxy.endpoint if v == server.endpoint else v for k, v in server.env.items()})
    build = subprocess.Popen([sys.executable, '-m', 'pipelines.cli', 'build', '--output', root, '--versioned',
                              '--run_id', run_id, *FLAGS, *flags], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    wait_stopped(build)
    return build


def manifest_of(url: str) -> dict:
    return json.loads(storage.read_bytes(f'{url}/manifest.json'))


def run_files(url: str, local) -> dict:
    return data_files(download(url, local))


def test_build_rebuilds_query_and_sync_on_an_object_store_as_on_local_disk(
        object_store, sample_root, embedding_model, tmp_path):
    corpus, local_root = sample_root
    remote_corpus = upload(corpus, f'{object_store}/corpus')
    root = f'{object_store}/index'
    flags = ['--input', remote_corpus, '--output', root, '--versioned', *FLAGS]

    build_index.run(flags + ['--run_id', 'r1'])
    local = data_files(local_root / 'runs' / 'r1')
    assert same_build(run_files(f'{root}/runs/r1', tmp_path / 'r1'), local, remote_corpus, corpus)

    # Unchanged: the previous run and the feature cache are found under their prefixes.
    second = build_index.run(flags + ['--run_id', 'r2'])
    assert second['cache']['features']['embedding']['computed'] == 0
    assert second['cache']['features']['embedding']['hits'] == second['counts']['chunks_before_filters']
    assert run_files(f'{root}/runs/r2', tmp_path / 'r2') == run_files(f'{root}/runs/r1', tmp_path / 'r1')
    diff = json.loads(storage.read_bytes(f'{root}/runs/r2/diff.json'))
    assert (diff['previous_run'], diff['documents']['unchanged']) == ('r1', second['counts']['documents_indexed'])
    # The relative gates compared with r1 (none skipped for want of a previous run).
    assert second['gates']['previous_run'] == 'r1'
    assert [c['status'] for c in second['gates']['checks']] == ['pass'] * len(second['gates']['checks'])

    # Changed: one document rewritten; only its chunks are embedded again.
    history = f'{remote_corpus}/history.txt'
    storage.write_bytes(history, storage.read_bytes(history).replace(b'the', b'THE', 3))
    third = build_index.run(flags + ['--run_id', 'r3'])
    diff = json.loads(storage.read_bytes(f'{root}/runs/r3/diff.json'))
    assert diff['documents']['changed']['count'] == 1
    assert 0 < third['cache']['features']['embedding']['computed'] < third['counts']['chunks_before_filters']
    assert snapshots.read_latest(root) == 'r3'

    # Read through LATEST and the manifest's digests, like a local index.
    hits = Retriever(root, model=embedding_model).search('How long does sourdough need to rise?', k=3).hits
    assert hits and hits[0].doc_id.startswith('guides/sourdough')
    report = sync_job.run(['--index', root, '--to', f'lancedb://{tmp_path}/lance', '--progress', 'none'])
    assert report.upserted == third['counts']['chunks'] + third['counts']['deltas']


def test_a_damaged_remote_index_is_refused_by_its_digests(object_store, sample_root, embedding_model):
    corpus, _ = sample_root
    output = f'{object_store}/plain'
    build_index.run(['--input', str(corpus), '--output', output, *FLAGS])
    part = storage.match(f'{output}/chunks/part-*')[0].path
    storage.write_bytes(part, storage.read_bytes(part)[:-10] + b'x' * 10)
    with pytest.raises(ValueError, match=f'{part} does not match the SHA-256'):
        Retriever(output, model=embedding_model)


def test_a_plain_rebuild_with_other_shards_replaces_the_index_whole(object_store, sample_root, embedding_model):
    corpus, _ = sample_root
    output = f'{object_store}/plain'
    for shards in (3, 2):
        build_index.run(['--input', str(corpus), '--output', output, '--num_shards', str(shards), *FLAGS])
    parts = [f.path.rsplit('/', 1)[1] for f in storage.list_files(f'{output}/chunks')]
    assert parts == ['part-00000-of-00002.parquet', 'part-00001-of-00002.parquet']
    # Nothing of the staging or of the publish is left beside or inside the index.
    leftovers = [f.path for f in storage.list_files(storage.parent(output)) if not f.path.startswith(output + '/')]
    assert leftovers == [] and not storage.exists(f'{output}/.publishing')
    assert Retriever(output, model=embedding_model).search('sourdough', k=1).hits


def test_a_second_build_on_a_leased_root_is_refused_naming_the_holder(object_store, sample_root):
    corpus, _ = sample_root
    root = f'{object_store}/index'
    with leases.held(f'{root}/{snapshots.LOCK_FILE}', root, seconds=60):
        with pytest.raises(ValueError, match=rf'another ragsieve build is writing to {root} \(held by .+:\d+, '):
            build_index.run(['--input', str(corpus), '--output', root, '--versioned', *FLAGS])
    assert storage.list_files(root) == []  # refused before anything was written


def test_a_build_killed_mid_run_leaves_latest_and_its_lease_expires(object_store, sample_root):
    corpus, _ = sample_root
    root = f'{object_store}/index'
    # Only the build to be killed or paused has a short lease (20 s: a loaded machine's renewal may come late by
    # a few seconds, and a lease is lost at three quarters of its length); a build that must finish, the default.
    flags = ['--input', str(corpus), '--output', root, '--versioned', *FLAGS]
    build_index.run(flags + ['--run_id', 'r1'])
    env = {**os.environ, KILL_AT_ENV: 'chunks_written'}  # inside the pipeline: its chunk parts are written
    killed = subprocess.run([sys.executable, '-m', 'pipelines.cli', 'build', *flags, '--run_id', 'r2',
                             '--lease_seconds', '20'], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert snapshots.read_latest(root) == 'r1'
    assert storage.has_files(f'{root}/runs/r2') and storage.exists(f'{root}/{snapshots.LOCK_FILE}')
    wait_leases_expired(root)  # the killed build's leases expire; nothing else frees the root
    build_index.run(flags + ['--run_id', 'r3'])
    assert snapshots.read_latest(root) == 'r3'
    assert not storage.has_files(f'{root}/runs/r2')  # its leftovers were deleted
    assert not storage.exists(f'{root}/{snapshots.LOCK_FILE}')  # given back at the end


def test_beams_s3_flags_alone_reach_every_launcher_step_and_the_secret_is_never_printed(
        minio, sample_root, tmp_path, monkeypatch):
    corpus, local_root = sample_root
    env = {k: v for k, v in os.environ.items() if not k.startswith('AWS_')}  # the flags are all it has
    root = f's3://{BUCKET}/flags-only'
    flags = ['--s3_endpoint_url', minio.endpoint, '--s3_access_key_id', MINIO_USER,
             '--s3_secret_access_key', MINIO_PASSWORD, '--s3_region_name', 'us-east-1']
    done = subprocess.run([sys.executable, '-m', 'pipelines.cli', 'build', '--input', str(corpus), '--output', root,
                           '--versioned', '--run_id', 'r1', *FLAGS, *flags], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert MINIO_PASSWORD not in done.stdout + done.stderr
    for key, value in minio.env.items():  # to read the run back here
        monkeypatch.setenv(key, value)
    storage.configure()
    assert data_files(download(f'{root}/runs/r1', tmp_path / 'r1')) == data_files(local_root / 'runs' / 'r1')
    assert MINIO_PASSWORD.encode() not in storage.read_bytes(f'{root}/runs/r1/manifest.json')


def test_a_failed_build_leaves_no_object_behind(object_store, tmp_path):
    (tmp_path / 'corpus').mkdir()
    (tmp_path / 'corpus' / 'blank.md').write_text('  \n')
    output = f'{object_store}/plain'
    with pytest.raises(ValueError, match='no document was indexed'):
        build_index.run(['--input', str(tmp_path / 'corpus'), '--output', output, *FLAGS])
    assert storage.list_files(object_store) == []  # neither its staging nor its lease


def test_a_build_paused_past_its_lease_publishes_nothing_over_the_build_that_took_over(
        object_store, sample_root, request):
    corpus, _ = sample_root
    server = request.getfixturevalue('minio' if object_store.startswith('s3') else 'fake_gcs')
    root = f'{object_store}/index'
    flags = ['--input', str(corpus)]
    build_index.run(['--output', root, '--versioned', '--run_id', 'r1', *FLAGS, *flags])
    with fault_proxy(server) as proxy:  # the stale build reaches the store through it
        # Paused (SIGSTOP) with its run complete, about to commit and publish,
        stale = paused_build(root, 'stale', *flags, '--lease_seconds', '20', stop_at='after_manifest', server=server,
                             proxy=proxy)
        try:
            proxy.drop('*', '/.lock')  # and cut off: its renewals never reach the store
            wait_leases_expired(root)  # its leases run out, as the next build judges them
            build_index.run(['--output', root, '--versioned', '--run_id', 'newer', *FLAGS, *flags])
            after_newer = objects_under(root)
            os.kill(stale.pid, signal.SIGCONT)
            _, stderr = stale.communicate(timeout=600)
        finally:
            stale.kill()
    assert stale.returncode == 2, stderr[-3000:]
    assert re.search(rf'^ragsieve build: error: the lease {root}/(cache/)?\.lock on {root}(/cache)? was lost: no '
                     r'renewal succeeded for \d+ s .+ nothing was published$', stderr.strip().splitlines()[-1])
    assert snapshots.read_latest(root) == 'newer'
    # The newer run, its cache generation and LATEST as it left them; of the stale run, nothing.
    assert objects_under(root) == {p: b for p, b in after_newer.items() if '/runs/stale/' not in p}


def test_latest_is_published_only_over_the_version_its_build_read(object_store):
    root = f'{object_store}/index'
    snapshots.publish_latest(root, 'r1', None)
    read = snapshots.latest_version(root)
    snapshots.publish_latest(root, 'r2', read)  # e.g. a build that took the root over from a paused one
    with pytest.raises(snapshots.Superseded, match=rf'^{root}/LATEST changed since this build read it \(it names '
                                                   r'r2 now\): .+ run r3 was not published$'):
        snapshots.publish_latest(root, 'r3', read)
    with pytest.raises(snapshots.Superseded):
        snapshots.publish_latest(root, 'r3', None)  # "none yet", but there is one
    assert snapshots.read_latest(root) == 'r2'


def test_a_lost_answer_to_latest_is_found_to_be_this_builds_own(object_store, request, monkeypatch):
    server = request.getfixturevalue('minio' if object_store.startswith('s3') else 'fake_gcs')
    root = f'{object_store}/index'
    snapshots.publish_latest(root, 'r1', None)
    with fault_proxy(server, monkeypatch) as proxy:
        read = snapshots.latest_version(root)
        proxy.lose_answer('PUT' if object_store.startswith('s3') else 'POST', '/LATEST')
        snapshots.publish_latest(root, 'r2', read)  # applied, its answer lost, the retry refused: ours
        assert [a for _, _, a in proxy.seen].count('lose_answer') == 1
        assert snapshots.read_latest(root) == 'r2'


def test_a_store_down_for_a_while_mid_build_is_waited_for(minio, s3_root, sample_root):
    corpus, _ = sample_root
    root = s3_root
    with fault_proxy(minio) as proxy:
        build = paused_build(root, 'r1', '--input', str(corpus), server=minio, proxy=proxy)
        try:
            proxy.drop('*', '')  # the store goes away: every request's connection is closed unanswered
            os.kill(build.pid, signal.SIGCONT)
            while [a for _, _, a in proxy.seen].count('drop') < 8:  # the build has tried again and again
                assert build.poll() is None, build.communicate()[1][-3000:]
                time.sleep(0.05)
            proxy.clear()  # and comes back
            _, stderr = build.communicate(timeout=600)
        finally:
            build.kill()
    assert build.returncode == 0, stderr[-3000:]
    assert 'does not answer' in stderr and 'Traceback' not in stderr
    assert snapshots.read_latest(root) == 'r1'


def test_a_store_that_stays_down_fails_the_build_in_one_line_within_its_bound(minio, s3_root, sample_root):
    corpus, _ = sample_root
    root = s3_root
    flags = ['--input', str(corpus), '--output', root, '--versioned', *FLAGS]
    build_index.run(flags + ['--run_id', 'r1'])
    before = objects_under(root)
    with fault_proxy(minio) as proxy:
        build = paused_build(root, 'r2', '--input', str(corpus), '--store_retry_seconds', '2', server=minio,
                             proxy=proxy)
        try:
            proxy.drop('*', '')
            os.kill(build.pid, signal.SIGCONT)
            _, stderr = build.communicate(timeout=600)
        finally:
            build.kill()
    assert build.returncode == 2, stderr[-3000:]
    assert re.match(r'^ragsieve build: error: the object store did not answer for 2 s \(--store_retry_seconds\): '
                    r'.+; nothing was published$', stderr.strip().splitlines()[-1])
    assert 'Traceback' not in stderr
    # LATEST, r1 and the cache's r1 as they were; of r2 (its run, its cache generation, its leases) what the
    # store never let it delete, which the next build deletes.
    after = objects_under(root)
    assert {p: b for p, b in after.items() if '/r2/' not in p and not p.endswith('.lock')} == before


def test_a_failed_versioned_build_leaves_neither_its_run_nor_its_cache_generation(object_store, tmp_path):
    (tmp_path / 'corpus').mkdir()
    (tmp_path / 'corpus' / 'blank.md').write_text('  \n')
    root = f'{object_store}/index'
    with pytest.raises(ValueError, match='no document was indexed'):
        build_index.run(['--input', str(tmp_path / 'corpus'), '--output', root, '--versioned', *FLAGS])
    assert storage.list_files(object_store) == []  # no run, no cache generation, no lease


def test_a_build_paused_mid_pipeline_whose_run_the_next_build_deleted_says_it_lost_its_lease(s3_root, sample_root):
    corpus, _ = sample_root
    root = s3_root
    flags = ['--input', str(corpus)]
    # Its chunk parts written, no index yet.
    stale = paused_build(root, 'stale', *flags, '--lease_seconds', '20', stop_at='chunks_written')
    try:
        wait_leases_expired(root)
        # Takes the root over and deletes the stale run's parts.
        build_index.run(['--output', root, '--versioned', '--run_id', 'newer', *FLAGS, *flags])
        os.kill(stale.pid, signal.SIGCONT)
        _, stderr = stale.communicate(timeout=600)
    finally:
        stale.kill()
    assert stale.returncode == 2, stderr[-3000:]
    assert re.search(rf'^ragsieve build: error: the lease {root}/(cache/)?\.lock on {root}(/cache)? was lost',
                     stderr.strip().splitlines()[-1]), stderr[-3000:]
    assert snapshots.read_latest(root) == 'newer' and not storage.has_files(f'{root}/runs/stale')
