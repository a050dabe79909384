"""The build on a Flink cluster of hosts that share nothing (`flink_hosts`): the DirectRunner's bytes, live counts.

The hosts are network and mount namespaces on this machine (engines/hosts.py):
each has its own /tmp and HOME, reaches the others by name only, and sees
the program files at the same paths, as a machine image gives them. MinIO
runs alone on `storage`; the build runs as a user runs it, `ragsieve build`
on the `launcher` host (or on `jobmanager`), with input, output and cache
on s3://. Its tables are compared with the DirectRunner's build of the same
corpus on this machine. Lost hosts, a killed launcher: test_lost_hosts.py.
"""

import json

from tests.helpers import (BUCKET, HOST_BUILD_FLAGS, PROGRESS_LOG, build_on_host, data_files, download_to_launcher,
                           live_chunk_counts, many_documents, same_build, upload_from_launcher)


def test_a_build_across_hosts_gives_the_direct_runners_bytes_and_its_nightly_rebuild_embeds_nothing(
        flink_hosts, sample_root):
    corpus, direct_root = sample_root
    prefix = f's3://{BUCKET}/across'
    remote_corpus = upload_from_launcher(flink_hosts, corpus, f'{prefix}/corpus')
    done = build_on_host(flink_hosts, 'launcher', remote_corpus, f'{prefix}/index', 'm1', *PROGRESS_LOG,
                         *flink_hosts.build_flags())
    assert done.returncode == 0, done.stderr[-3000:]
    # The workers' counts arrive from the TaskManager hosts at the launcher's address on its route to them.
    assert f'the workers send them to {flink_hosts.hosts["launcher"].address}:' in done.stderr
    assert max(live_chunk_counts(done.stderr), default=0) > 0, done.stderr[-3000:]
    first = download_to_launcher(flink_hosts, f'{prefix}/index/runs/m1', 'm1')
    assert same_build(data_files(first), data_files(direct_root / 'runs' / 'r1'), remote_corpus, corpus)

    again = build_on_host(flink_hosts, 'launcher', remote_corpus, f'{prefix}/index', 'm2', *flink_hosts.build_flags())
    assert again.returncode == 0, again.stderr[-3000:]
    assert 'embedding 0 computed / 36 cached' in again.stderr, again.stderr[-3000:]
    assert data_files(download_to_launcher(flink_hosts, f'{prefix}/index/runs/m2', 'm2')) == data_files(first)
    # The SDK workers leave no scratch directory on their hosts (each left a ragsieve-sdk-* one before).
    for i in range(flink_hosts.settings.taskmanagers):
        assert not list(flink_hosts.hosts[f'taskmanager-{i}'].tmp.glob('ragsieve-sdk-*'))


def test_a_build_launched_on_the_jobmanager_host_with_a_localhost_master_reports_live_counts(
        flink_hosts, tmp_path):
    """Launched where `--flink_master localhost:8081` is right, the workers still get an address they reach; the
    job, healthy, runs far longer than its 20 s stall bound and is not cancelled."""
    from pipelines.build_index import job

    corpus = many_documents(tmp_path / 'many')
    job.run(['--input', str(corpus), '--output', str(tmp_path / 'direct'), *HOST_BUILD_FLAGS])
    prefix = f's3://{BUCKET}/on-jobmanager'
    remote_corpus = upload_from_launcher(flink_hosts, corpus, f'{prefix}/corpus')
    flags = [f if f != flink_hosts.master else 'localhost:8081' for f in flink_hosts.build_flags()]
    done = build_on_host(flink_hosts, 'jobmanager', remote_corpus, f'{prefix}/index', 'j1', *PROGRESS_LOG, *flags,
                         '--engine_stall_timeout', '20')
    assert done.returncode == 0, done.stderr[-3000:]
    assert f'the workers send them to {flink_hosts.hosts["jobmanager"].address}:' in done.stderr
    assert max(live_chunk_counts(done.stderr), default=0) > 0, done.stderr[-3000:]
    built = download_to_launcher(flink_hosts, f'{prefix}/index/runs/j1', 'j1')
    assert same_build(data_files(built), data_files(tmp_path / 'direct'), remote_corpus, corpus)
    manifest = json.loads((built / 'manifest.json').read_text())
    assert manifest['counts']['documents_indexed'] == 300 and manifest['counts']['dropped'] > 0
