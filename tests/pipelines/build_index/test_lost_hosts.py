"""Faults of a Flink cluster of hosts that share nothing (`flink_hosts`), each ended cleanly, tested for real.

A host is lost as a machine is (its link cut, every process on it SIGKILLed:
`engines.multihost.FlinkHosts.cut`), a worker stalls as a stopped process
does (SIGSTOP), a launcher dies as the OOM killer kills it (SIGKILL); the
builds run as a user runs them (`ragsieve build` on `launcher`, s3:// input,
output and cache). After each test the session's cluster has its hosts back.
"""

import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.helpers import (BUCKET, PROGRESS_LOG, build_on_host, cpu_burners, data_files, download_to_launcher,
                           objects_on_store, same_build, upload_from_launcher)


def embedding_taskmanager(cluster):
    """The TaskManager that runs the filters' stage (the embedding's) as Flink says, once it runs; None before."""
    from engines import processes

    def look():
        jobs = (processes.read_json(f'{cluster.rest}/jobs/overview') or {}).get('jobs', [])
        for job in jobs:
            if job['state'] != 'RUNNING':
                continue
            for vertex in (processes.read_json(f'{cluster.rest}/jobs/{job["jid"]}') or {}).get('vertices', []):
                if vertex['status'] == 'RUNNING' and 'FilterChunks' in vertex['name']:
                    where = processes.read_json(f'{cluster.rest}/jobs/{job["jid"]}/vertices/{vertex["id"]}'
                                                '/taskmanagers') or {}
                    return [m.get('taskmanager-id') for m in where.get('taskmanagers', [])
                            if m.get('status') == 'RUNNING']
        return []

    running = [int(found.rsplit('-', 1)[1]) for found in cluster.call('launcher', look)
               if found and re.fullmatch(r'tm-\d+', found)]
    return running[0] if running else None


def build_losing_a_host(cluster, corpus, root, run_id, *flags, host=None, runner=None, then=None):
    """Builds from the launcher and cuts `host` (default: the host of the TaskManager that embeds) once the job
    embeds, then polls `then` (if given) until it returns True; the session's cluster gets the host back after.

    Args:
      runner: The flags that send the build to the cluster; default: its FlinkRunner's (`build_flags`).

    Returns:
      The build and the hosts lost.
    """
    lost = []

    def cut_once_it_embeds(process) -> bool:
        if not lost:
            i = embedding_taskmanager(cluster)
            if i is None:
                return False
            lost.append(host or f'taskmanager-{i}')
            cluster.cut(lost[-1])
        return then is None or then(process)

    try:
        done = build_on_host(cluster, 'launcher', corpus, root, run_id, *(runner or cluster.build_flags()), *flags,
                             wait=cut_once_it_embeds)
    finally:
        for name in lost:
            cluster.mend(name)
        cluster.wait_for_taskmanagers(cluster.settings.taskmanagers)
    return done, lost


def progress_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if 'ragsieve.build: progress ' in line]


def number(text: str) -> int:
    return int(text.replace(',', ''))


def counts_past_their_input(stderr: str, files: int, chunks: int) -> list[str]:
    """The view's lines that show more files read than the input holds, more chunks made or embedded than the
    corpus has, or more embedded than the embedding meter's own total."""
    wrong = []
    for line in progress_lines(stderr):
        read = re.search(r'read ([\d,]+)/([\d,]+) files', line)
        made = re.search(r'; chunk ([\d,]+) chunks', line)
        embedded = re.search(r'; embed ([\d,]+)/([\d,]+) chunks', line)
        if ((read and (number(read.group(1)) > files or number(read.group(2)) != files))
                or (made and number(made.group(1)) > chunks)
                or (embedded and number(embedded.group(1)) > min(chunks, number(embedded.group(2))))):
            wrong.append(line)
    return wrong


# Under load: two CPU burners beside the cluster (CI runs a build on its other worker), as the lost host was
# first seen to hang there (the restarted job's SDK worker "waiting to receive elements" until the stall bound).
def test_a_lost_taskmanager_host_is_survived_with_the_same_bytes_and_counts_of_one_attempt(flink_hosts, sample_root):
    """The host of the TaskManager that embeds is lost (link cut, every process SIGKILLed) while the other
    TaskManager has a free slot: Flink restarts the job there (the cluster's default restarts) and the build
    publishes the DirectRunner's bytes, exit 0; the live view shows the attempt that runs, never the failed
    attempt's counts added to it."""
    corpus, direct_root = sample_root
    prefix = f's3://{BUCKET}/lost-host'
    remote_corpus = upload_from_launcher(flink_hosts, corpus, f'{prefix}/corpus')
    started, log = time.monotonic(), flink_hosts.logs['jobmanager']
    logged = len(log.read_text())  # the session's cluster: this test's failovers are logged after
    with cpu_burners(2):
        done, lost = build_losing_a_host(flink_hosts, remote_corpus, f'{prefix}/index', 'l1', '--parallelism', '1',
                                         *PROGRESS_LOG)
    assert lost and done.returncode == 0, done.stderr[-3000:]
    built = download_to_launcher(flink_hosts, f'{prefix}/index/runs/l1', 'l1')
    assert same_build(data_files(built), data_files(direct_root / 'runs' / 'r1'), remote_corpus, corpus)
    failovers = log.read_text()[logged:].count('to RESTARTING')
    assert 1 <= failovers <= flink_hosts.settings.restart_attempts, failovers
    counts = json.loads((built / 'manifest.json').read_text())['counts']
    files, chunks = counts['files'], counts['chunks_before_filters']
    assert counts_past_their_input(done.stderr, files, chunks) == [], done.stderr[-3000:]
    assert any(re.search(r'; embed [1-9]', line) for line in progress_lines(done.stderr)), done.stderr[-3000:]
    print(f'lost {lost[0]} host: {failovers} failovers, {time.monotonic() - started:.0f} s in all')


def test_a_job_stopped_after_a_failover_ends_at_the_stall_bound_in_one_line_naming_where(flink_hosts, sample_root):
    """The embedding host lost, the job restarted on the other TaskManager, whose SDK workers are then stopped
    (SIGSTOP) as they start: the counts stand still, and --engine_stall_timeout ends the build in one line naming
    where they stopped, exit 6; Flink runs no job of it after, and nothing is published."""
    from engines import processes
    from tests.helpers import sdk_workers

    corpus, _ = sample_root
    prefix = f's3://{BUCKET}/stopped'
    remote_corpus = upload_from_launcher(flink_hosts, corpus, f'{prefix}/corpus')
    log = flink_hosts.logs['jobmanager']
    logged, stopped = len(log.read_text()), []

    def stop_the_restarted_workers(_process) -> bool:
        """Stops every SDK worker of the TaskManager that embeds once the job restarted, a later attempt's too
        (a task that read the lost host's results fails the job again); polled until the build ends."""
        if 'from state RESTARTING to RUNNING' not in log.read_text()[logged:]:
            return False  # the failed attempt's workers may still be up: the restarted job's are stopped
        i = embedding_taskmanager(flink_hosts)
        for pid in sdk_workers(flink_hosts.daemons[f'taskmanager-{i}']) if i is not None else []:
            if pid not in stopped:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        return False

    def running():
        jobs = (processes.read_json(f'{flink_hosts.rest}/jobs/overview') or {}).get('jobs', [])
        return [j['jid'] for j in jobs if j['state'] not in ('FINISHED', 'FAILED', 'CANCELED')]

    try:
        done, lost = build_losing_a_host(flink_hosts, remote_corpus, f'{prefix}/index', 's1', '--parallelism', '1',
                                         '--engine_stall_timeout', '60', *PROGRESS_LOG, then=stop_the_restarted_workers)
        lines = [line for line in done.stderr.splitlines() if line.startswith('ragsieve build:')]
        assert lost and stopped and done.returncode == 6, done.stderr[-3000:]
        assert len(lines) == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
        assert re.search(r'made no progress on \w+ for 60 s \(--engine_stall_timeout\) \(stopped at: .*embed [\d,]+/',
                         lines[0]), lines[0]
        assert 'nothing was published' in lines[0], lines[0]
        deadline = time.monotonic() + 60  # the cancellation was asked before the build ended
        while flink_hosts.call('launcher', running) and time.monotonic() < deadline:
            time.sleep(1)
        assert flink_hosts.call('launcher', running) == []
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert objects_on_store(flink_hosts, f'{prefix}/index') == []


def test_a_launcher_killed_mid_embedding_takes_its_job_server_along_and_the_next_build_cancels_its_job(
        flink_hosts, sample_root):
    """kill -9 of the build on `launcher` while its job embeds: the job server it started (a JVM on the launcher
    host) dies with it at once; its Flink job runs on until the next build on the root takes the expired lease
    over, which cancels it through Flink's REST API, saying so, before it deletes what the killed build left.
    After the next build: no job of the killed one runs, no object of it is left, and the run is a fresh build's.
    The orphaned job's SDK workers are stopped (SIGSTOP) with the launcher's kill, so that it still runs when the
    lease expires, as a corpus of users' size would (this one's job would end by itself within a minute)."""
    from engines import processes
    from tests.helpers import sdk_workers

    corpus, direct_root = sample_root
    prefix = f's3://{BUCKET}/killed'
    remote_corpus = upload_from_launcher(flink_hosts, corpus, f'{prefix}/corpus')
    lease = ['--lease_seconds', '30']
    killed, stopped = [], []

    def kill_the_launcher(process) -> bool:
        i = embedding_taskmanager(flink_hosts)
        if i is None:
            return False
        os.kill(process.pid, signal.SIGKILL)
        killed.append(time.monotonic())
        for pid in sdk_workers(flink_hosts.daemons[f'taskmanager-{i}']):
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        return True

    def jobs(name_part):
        jobs = (processes.read_json(f'{flink_hosts.rest}/jobs/overview') or {}).get('jobs', [])
        return {j['name']: j['state'] for j in jobs if name_part in j['name']}

    try:
        first = build_on_host(flink_hosts, 'launcher', remote_corpus, f'{prefix}/index', 'k1', *lease,
                              *flink_hosts.build_flags(), wait=kill_the_launcher)
        assert killed and first.returncode == -signal.SIGKILL, first.stderr[-3000:]
        deadline = time.monotonic() + 30  # the kernel kills it with its parent; a loaded machine reaps it later
        while any(b'java' in Path(f'/proc/{pid}/cmdline').read_bytes() for pid in flink_hosts.hosts.pids('launcher')
                  if Path(f'/proc/{pid}/cmdline').exists()) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [Path(f'/proc/{pid}/cmdline').read_bytes()[:80] for pid in flink_hosts.hosts.pids('launcher')
                if Path(f'/proc/{pid}/cmdline').exists()]
        assert not [c for c in left if b'java' in c], left
        assert list(flink_hosts.call('launcher', jobs, 'ragsieve-k1').values()) == ['RUNNING']  # an orphan, for now

        for _ in range(20):  # refused while the killed build's lease has not expired (30 s)
            second = build_on_host(flink_hosts, 'launcher', remote_corpus, f'{prefix}/index', 'k2', *lease,
                                   *flink_hosts.build_flags())
            if 'another ragsieve build is writing to' not in second.stderr:
                break
            time.sleep(5)
        assert second.returncode == 0, second.stderr[-3000:]
        assert re.search(r'cancelled Flink job \w+ \(ragsieve-k1-\d+\) of the killed build \S+ that held the lease: '
                         r'ended in', second.stderr), second.stderr[-3000:]
        assert set(flink_hosts.call('launcher', jobs, 'ragsieve-k1').values()) == {'CANCELED'}
        left = objects_on_store(flink_hosts, f'{prefix}/index')
        assert not [path for path in left if '/k1/' in path or path.endswith('/k1')], left
        built = download_to_launcher(flink_hosts, f'{prefix}/index/runs/k2', 'k2')
        assert same_build(data_files(built), data_files(direct_root / 'runs' / 'r1'), remote_corpus, corpus)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_lost_taskmanager_host_with_no_slot_left_is_one_line_naming_it(flink_hosts, sample_root):
    """Both slots embed and one host is lost: no slot is left for the restarted job, which waits for one; the
    stall bound ends the build in one line with Flink's last failure, the lost TaskManager's, exit 6, and
    leaves nothing behind: no run, no LATEST, no lease, no cache generation."""
    corpus, _ = sample_root
    prefix = f's3://{BUCKET}/no-slot'
    remote_corpus = upload_from_launcher(flink_hosts, corpus, f'{prefix}/corpus')
    done, lost = build_losing_a_host(flink_hosts, remote_corpus, f'{prefix}/index', 'n1',
                                     '--engine_stall_timeout', '60')
    assert lost and done.returncode == 6, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith('ragsieve build:')]
    assert len(lines) == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert f'tm-{lost[0].rsplit("-", 1)[1]}' in lines[0] and 'nothing was published' in lines[0], lines[0]
    assert objects_on_store(flink_hosts, f"{prefix}/index") == []


@pytest.mark.parametrize('host, role, address', [
    ('jobserver', 'Beam job server', 'jobserver:8099'),
    ('storage', 'object store', 'storage:9000'),
    ('jobmanager', 'Flink JobManager', 'jobmanager:8081'),
])
def test_a_lost_service_host_ends_the_build_in_one_line_naming_its_role_and_address(flink_hosts, sample_root, host,
                                                                                      role, address):
    """The host of the job server (a PortableRunner build), of the store, or of the JobManager is lost while
    the job embeds: the build ends with exit 6 in one line that names the role and its address, not only
    Java's exception, its job cancelled where Flink still answers; nothing is published."""
    from engines import processes

    corpus, _ = sample_root
    prefix = f's3://{BUCKET}/lost-{host}'
    remote_corpus = upload_from_launcher(flink_hosts, corpus, f'{prefix}/corpus')
    runner = flink_hosts.portable_flags() if host == 'jobserver' else flink_hosts.build_flags()
    started = time.monotonic()
    # A short lease and store retries: a build cut off from its store learns it once its lease would lapse, and
    # gives up deleting its run there in 20 s (the next build deletes it).
    done, lost = build_losing_a_host(flink_hosts, remote_corpus, f'{prefix}/index', 'x1', '--lease_seconds', '30',
                                     '--store_retry_seconds', '20', host=host, runner=runner)
    lines = [line for line in done.stderr.splitlines() if line.startswith('ragsieve build:')]
    assert lost == [host] and done.returncode == 6, done.stderr[-3000:]
    assert len(lines) == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert lines[0].startswith(f'ragsieve build: error: the {role} at {address} (') and 'does not answer' in lines[0]
    assert lines[0].endswith('nothing was published'), lines[0]

    def running():
        jobs = (processes.read_json(f'{flink_hosts.rest}/jobs/overview') or {}).get('jobs', [])
        return [j['name'] for j in jobs if 'ragsieve-x1' in j['name'] and j['state'] not in ('FINISHED', 'FAILED',
                                                                                             'CANCELED')]

    assert flink_hosts.call('launcher', running) == []
    assert f'{prefix}/index/LATEST' not in objects_on_store(flink_hosts, f'{prefix}/index')
    print(f'lost {host}: exit {done.returncode} after {time.monotonic() - started:.0f} s: {lines[0]}')
