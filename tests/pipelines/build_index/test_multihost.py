"""The build on a Flink cluster of hosts that share nothing (`flink_hosts`): the DirectRunner's bytes, a lost host.

The hosts are network and mount namespaces on this machine (engines/hosts.py):
each has its own /tmp and HOME, reaches the others by name only, and sees
the program files at the same paths, as a machine image gives them. MinIO
runs alone on `storage`; the build runs as a user runs it, `ragsieve build`
on the `launcher` host (or on `jobmanager`), with input, output and cache
on s3://. Its tables are compared with the DirectRunner's build of the same
corpus on this machine.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import BUCKET, REPO, data_files, many_documents, same_build

FLAGS = ['--chunk_size', '64']
PROGRESS = ['--progress', 'log', '--progress_interval', '1']
PYTHON = sys.executable


def on_host(cluster, host, argv, wait=None, timeout=1800):
    """Runs `argv` (python's arguments) on `host` from the checkout, with the store's settings; with `wait`,
    calls it with the process until it returns True."""
    command = cluster.hosts.command(host, [PYTHON, *argv], cwd=str(REPO))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=cluster.hosts.environment(cluster.store_env), start_new_session=True)
    while wait is not None and process.poll() is None and not wait(process):
        time.sleep(0.5)
    out, err = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def build(cluster, host, corpus, root, run_id, *flags, wait=None):
    return on_host(cluster, host, ['-m', 'pipelines.cli', 'build', '--input', corpus, '--output', root, '--versioned',
                                   '--run_id', run_id, *FLAGS, *flags], wait)


def upload(cluster, local: Path, url: str) -> str:
    """Copies `local` onto the launcher's disk, then from there to `url` on MinIO."""
    name = re.sub(r'[^a-z0-9]+', '-', url)
    staged = cluster.hosts['launcher'].tmp / 'upload' / name
    shutil.copytree(local, staged)
    try:
        done = on_host(cluster, 'launcher', ['-c', 'import sys; from tests.helpers import upload; '
                                             'upload(*sys.argv[1:])', f'/tmp/upload/{name}', url])
    finally:
        shutil.rmtree(staged)
    assert done.returncode == 0, done.stderr[-2000:]
    return url


def download(cluster, url: str, name: str) -> Path:
    """Copies the objects under `url` to the launcher's disk; returns where they lie on this machine."""
    done = on_host(cluster, 'launcher', ['-c', 'import sys; from tests.helpers import download; download(*sys.argv[1:])',
                                         url, f'/tmp/download/{name}'])
    assert done.returncode == 0, done.stderr[-2000:]
    return cluster.hosts['launcher'].tmp / 'download' / name


def live_chunk_counts(stderr: str) -> list[int]:
    return [int(n) for line in stderr.splitlines() if 'ragsieve.build: progress ' in line
            for n in re.findall(r'; chunk (\d+) chunks;', line)]


def test_a_build_across_hosts_gives_the_direct_runners_bytes_and_its_nightly_rebuild_embeds_nothing(
        flink_hosts, sample_root):
    corpus, direct_root = sample_root
    prefix = f's3://{BUCKET}/across'
    remote_corpus = upload(flink_hosts, corpus, f'{prefix}/corpus')
    done = build(flink_hosts, 'launcher', remote_corpus, f'{prefix}/index', 'm1', *PROGRESS,
                 *flink_hosts.build_flags())
    assert done.returncode == 0, done.stderr[-3000:]
    # The workers' counts arrive from the TaskManager hosts at the launcher's address on its route to them.
    assert f'the workers send them to {flink_hosts.hosts["launcher"].address}:' in done.stderr
    assert max(live_chunk_counts(done.stderr), default=0) > 0, done.stderr[-3000:]
    first = download(flink_hosts, f'{prefix}/index/runs/m1', 'm1')
    assert same_build(data_files(first), data_files(direct_root / 'runs' / 'r1'), remote_corpus, corpus)

    again = build(flink_hosts, 'launcher', remote_corpus, f'{prefix}/index', 'm2', *flink_hosts.build_flags())
    assert again.returncode == 0, again.stderr[-3000:]
    assert 'embedding 0 computed / 36 cached' in again.stderr, again.stderr[-3000:]
    assert data_files(download(flink_hosts, f'{prefix}/index/runs/m2', 'm2')) == data_files(first)
    # The SDK workers leave no scratch directory on their hosts (each left a ragsieve-sdk-* one before).
    for i in range(flink_hosts.settings.taskmanagers):
        assert not list(flink_hosts.hosts[f'taskmanager-{i}'].tmp.glob('ragsieve-sdk-*'))


def test_a_build_launched_on_the_jobmanager_host_with_a_localhost_master_reports_live_counts(
        flink_hosts, tmp_path):
    """Launched where `--flink_master localhost:8081` is right, the workers still get an address they reach; the
    job, healthy, runs far longer than its 20 s stall bound and is not cancelled."""
    from pipelines.build_index import job

    corpus = many_documents(tmp_path / 'many')
    job.run(['--input', str(corpus), '--output', str(tmp_path / 'direct'), *FLAGS])
    prefix = f's3://{BUCKET}/on-jobmanager'
    remote_corpus = upload(flink_hosts, corpus, f'{prefix}/corpus')
    flags = [f if f != flink_hosts.master else 'localhost:8081' for f in flink_hosts.build_flags()]
    done = build(flink_hosts, 'jobmanager', remote_corpus, f'{prefix}/index', 'j1', *PROGRESS, *flags,
                 '--engine_stall_timeout', '20')
    assert done.returncode == 0, done.stderr[-3000:]
    assert f'the workers send them to {flink_hosts.hosts["jobmanager"].address}:' in done.stderr
    assert max(live_chunk_counts(done.stderr), default=0) > 0, done.stderr[-3000:]
    built = download(flink_hosts, f'{prefix}/index/runs/j1', 'j1')
    assert same_build(data_files(built), data_files(tmp_path / 'direct'), remote_corpus, corpus)
    manifest = json.loads((built / 'manifest.json').read_text())
    assert manifest['counts']['documents_indexed'] == 300 and manifest['counts']['dropped'] > 0


def embedding_taskmanager(cluster):
    """The TaskManager whose SDK worker embeds, once the filters' stage runs; None before."""
    from engines import processes
    from tests.helpers import sdk_workers

    def look():
        jobs = (processes.read_json(f'{cluster.rest}/jobs/overview') or {}).get('jobs', [])
        return any(v['status'] == 'RUNNING' and 'FilterChunks' in v['name'] for job in jobs
                   for v in (processes.read_json(f'{cluster.rest}/jobs/{job["jid"]}') or {}).get('vertices', []))

    if not cluster.call('launcher', look):
        return None
    working = [i for i in range(cluster.settings.taskmanagers)
               if sdk_workers(cluster.daemons[f'taskmanager-{i}'])]
    return working[0] if working else None


def build_losing_a_host(cluster, corpus, root, run_id, *flags):
    """Builds from the launcher, cutting the host of the TaskManager that embeds once it does; the session's
    cluster gets the host back after. Returns the build and the TaskManagers lost."""
    lost = []

    def cut_the_embedding_host(_process) -> bool:
        i = embedding_taskmanager(cluster)
        if i is None:
            return False
        cluster.cut_taskmanager(i)
        lost.append(i)
        return True

    try:
        done = build(cluster, 'launcher', corpus, root, run_id, *cluster.build_flags(), *flags,
                     wait=cut_the_embedding_host)
    finally:
        for i in lost:
            cluster.mend_taskmanager(i)
        cluster.wait_for_taskmanagers(cluster.settings.taskmanagers)
    return done, lost


# Run by hand (RAGSIEVE_ENGINE_FAULTS=1 make test), as test_engines.py's recoveries are: it passed alone here
# (2 failovers, 219 s), but in one CI run, two builds on the machine beside it, the restarted job hung on
# taskmanager-0 (its SDK worker "waiting to receive elements" for 300 s and more) until the stall bound.
@pytest.mark.skipif(os.environ.get('RAGSIEVE_ENGINE_FAULTS') != '1',
                    reason='a lost host survived: 4 minutes, and once hung under load; run with RAGSIEVE_ENGINE_FAULTS=1')
def test_a_lost_taskmanager_host_is_survived_with_the_same_bytes(flink_hosts, sample_root):
    """The host of the TaskManager that embeds is lost (link cut, every process SIGKILLed) while the other
    TaskManager has a free slot: Flink restarts the job there (the cluster's default restarts) and the build
    publishes the DirectRunner's bytes, exit 0."""
    corpus, direct_root = sample_root
    prefix = f's3://{BUCKET}/lost-host'
    remote_corpus = upload(flink_hosts, corpus, f'{prefix}/corpus')
    started, log = time.monotonic(), flink_hosts.logs['jobmanager']
    logged = len(log.read_text())  # the session's cluster: this test's failovers are logged after
    done, lost = build_losing_a_host(flink_hosts, remote_corpus, f'{prefix}/index', 'l1', '--parallelism', '1')
    assert lost and done.returncode == 0, done.stderr[-3000:]
    built = download(flink_hosts, f'{prefix}/index/runs/l1', 'l1')
    assert same_build(data_files(built), data_files(direct_root / 'runs' / 'r1'), remote_corpus, corpus)
    failovers = log.read_text()[logged:].count('to RESTARTING')
    assert 1 <= failovers <= flink_hosts.settings.restart_attempts, failovers
    print(f'lost taskmanager-{lost[0]} host: {failovers} failovers, {time.monotonic() - started:.0f} s in all')


def objects(cluster, url: str) -> list[str]:
    """The objects under `url` on MinIO, listed from the launcher."""
    done = on_host(cluster, 'launcher', ['-c', 'import sys; from transforms import storage; '
                                         'print("\\n".join(f.path for f in storage.list_files(sys.argv[1])))', url])
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_a_lost_taskmanager_host_with_no_slot_left_is_one_line_naming_it(flink_hosts, sample_root):
    """Both slots embed and one host is lost: no slot is left for the restarted job, which waits for one; the
    stall bound ends the build in one line with Flink's last failure, the lost TaskManager's, exit 6, and
    leaves nothing behind: no run, no LATEST, no lease, no cache generation."""
    corpus, _ = sample_root
    prefix = f's3://{BUCKET}/no-slot'
    remote_corpus = upload(flink_hosts, corpus, f'{prefix}/corpus')
    done, lost = build_losing_a_host(flink_hosts, remote_corpus, f'{prefix}/index', 'n1', '--engine_stall_timeout', '60')
    assert lost and done.returncode == 6, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith('ragsieve build:')]
    assert len(lines) == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert f'tm-{lost[0]}' in lines[0] and 'nothing was published' in lines[0], lines[0]
    assert objects(flink_hosts, f"{prefix}/index") == []
