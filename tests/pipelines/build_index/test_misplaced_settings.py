"""Settings that only work on the launcher's host, tried on a cluster of hosts that share nothing (`flink_hosts`).

Each build runs as a user runs it, `python -m pipelines.cli build ...`, on
a simulated host (`launcher`, or the JobManager's or the store's host), so
exit statuses and lines are the real ones. A setting the workers on other
hosts cannot use is one line naming it, before the job starts where that
can be known then (no Flink job is submitted); a job server that cannot
reach Flink is one line naming both after the job server gave up.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from engines import multihost, processes
from tests.helpers import BUCKET, REPO

PREFIX = f's3://{BUCKET}/misplaced'
# The refusal every misplaced path ends in.
SHARED_STORAGE = 'it must be on storage every worker reaches (s3://, gs://, or a shared mount)'


def build(cluster, host, *flags, env=None, timeout=900):
    """`ragsieve build` on `host`, to its end."""
    return cluster.hosts.run(host, [sys.executable, '-m', 'pipelines.cli', 'build', '--chunk_size', '64', *flags],
                             env={**cluster.store_env, **(env or {})}, cwd=str(REPO), timeout=timeout)


def jobs(cluster) -> dict:
    """`{job id: state}` of the Flink jobs the JobManager knows."""
    overview = cluster.call('launcher', processes.read_json, f'{cluster.rest}/jobs/overview') or {}
    return {job['jid']: job['state'] for job in overview.get('jobs', [])}


def error_line(done) -> str:
    """The build's one line; no traceback came before it."""
    assert 'Traceback' not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith('ragsieve build:')]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope='module')
def corpus(flink_hosts):
    """sample_corpus/ on the storage host's MinIO."""
    local = flink_hosts.hosts['launcher'].tmp / 'corpus'
    shutil.copytree(REPO / 'sample_corpus', local, dirs_exist_ok=True)
    url = f'{PREFIX}/corpus'
    done = flink_hosts.hosts.run('launcher', [
        sys.executable, '-c', 'import sys; from tests.helpers import upload; from transforms import storage; '
        'storage.configure(); upload(sys.argv[1], sys.argv[2])', '/tmp/corpus', url],
        env=flink_hosts.store_env, cwd=str(REPO))
    assert done.returncode == 0, done.stderr[-3000:]
    return url


@pytest.mark.parametrize('host, flag', [('launcher', '--output'), ('launcher', '--input'), ('launcher', '--cache'),
                                        ('jobmanager', '--output')])
def test_a_local_path_while_the_workers_run_on_other_hosts_is_refused_before_the_job(flink_hosts, corpus, host, flag):
    """Was: a local --output ran the whole job, then 'holds no part-*.parquet files'; a local --input failed after
    the job. The launcher on the JobManager's host (`--flink_master localhost:8081`) too: its TaskManagers are not."""
    c = flink_hosts
    paths = {'--input': corpus, '--output': f'{PREFIX}/{host}{flag[1:]}', '--cache': None,
             flag: '/tmp/corpus' if flag == '--input' else f'/tmp/local{flag[1:]}'}
    engine = c.build_flags()
    if host == 'jobmanager':
        engine[engine.index(c.master)] = 'localhost:8081'
    before = jobs(c)
    started = time.monotonic()
    done = build(c, host, *(a for f, p in paths.items() if p for a in (f, p)), *engine)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    line = error_line(done)
    assert line.startswith(f"ragsieve build: error: {flag} {paths[flag]}: a path on this machine's own disk ("), line
    assert line.endswith("but the FlinkRunner workers run on other hosts (taskmanager-0, taskmanager-1: Flink's "
                         f'TaskManagers): {SHARED_STORAGE}'), line
    assert jobs(c) == before  # no job was submitted
    print(f'refused in {took:.1f} s')


def test_a_loopback_store_endpoint_while_the_workers_run_on_other_hosts_is_refused_before_the_job(flink_hosts, corpus):
    """The launcher on the store's host reaches MinIO at 127.0.0.1; the TaskManagers would look on their own."""
    c = flink_hosts
    before = jobs(c)
    done = build(c, 'storage', '--input', corpus, '--output', f'{PREFIX}/loopback-endpoint',
                 '--s3_endpoint_url', 'http://127.0.0.1:9000', *c.build_flags())
    assert done.returncode == 2, done.stderr[-3000:]
    assert error_line(done).startswith('ragsieve build: error: --s3_endpoint_url http://127.0.0.1:9000: a loopback '
                                       'address, which reaches the store from this machine only, but the FlinkRunner '
                                       'workers run on other hosts (taskmanager-0, taskmanager-1')
    assert jobs(c) == before


def test_a_loopback_flink_master_for_a_job_server_on_another_host_is_refused_before_the_job(flink_hosts, corpus):
    """The launcher on the JobManager's host reaches Flink at localhost; the job server on its own host would submit
    the job to its own loopback (a Flink job server submits to the pipeline's --flink_master)."""
    c = flink_hosts
    before = jobs(c)
    done = build(c, 'jobmanager', '--input', corpus, '--output', f'{PREFIX}/loopback-master', *c.portable_flags(),
                 '--flink_master', 'localhost:8081')
    assert done.returncode == 2, done.stderr[-3000:]
    assert error_line(done).startswith(
        'ragsieve build: error: --flink_master localhost:8081: a loopback address, but the job server at '
        'jobserver:8099 (--job_endpoint) runs on another host')
    assert jobs(c) == before


def test_a_job_server_that_gives_a_wildcard_artifact_address_is_one_line_naming_the_flag_to_pass(flink_hosts, corpus):
    """A job server started with `--job-host 0.0.0.0` gives 0.0.0.0:8298 for staging the job's artifacts: the launcher
    dials its own host. Was: exit 1, gRPC's traceback (`ipv4:0.0.0.0:8298: ... Connection refused`)."""
    c = flink_hosts
    before = jobs(c)
    with job_server(c, 'jobserver', 'wildcard-jobserver', c.master, 8299):
        done = build(c, 'launcher', '--input', corpus, '--output', f'{PREFIX}/wildcard', '--runner', 'PortableRunner',
                     '--job_endpoint', 'jobserver:8299', '--flink_master', c.master, '--parallelism', '2')
    assert done.returncode == 2, done.stderr[-3000:]
    assert error_line(done) == (
        "ragsieve build: error: the job server at jobserver:8299 (--job_endpoint) gave 0.0.0.0:8298 as its artifact "
        "service's address, which names no host (UNAVAILABLE): pass --artifact_endpoint jobserver:8298, or start the "
        "job server with --job-host set to its host's name")
    assert jobs(c) == before


@contextlib.contextmanager
def job_server(c, host: str, name: str, flink_master: str, port: int):
    """Beam's Flink job server on `host`, listening on 0.0.0.0 at `port` (artifacts `port - 1`), for the test."""
    c.launch_on(host, name, [c.java, '-jar', str(c.job_server), '--flink-master', flink_master,
                             '--job-host', '0.0.0.0', '--job-port', str(port), '--artifact-port', str(port - 1),
                             '--expansion-port', str(port - 2)])
    try:
        processes.wait_until(lambda: c.call('launcher', multihost.listening, c.hosts[host].address, port),
                             {name: c.daemons[name]}, {name: c.logs[name]}, 120, 'job server listening')
        yield
    finally:
        processes.stop(c.daemons.pop(name))
        c.logs.pop(name)


def test_a_job_server_that_cannot_reach_flink_ends_the_build_in_one_line_naming_both(flink_hosts, corpus):
    """A job server started with `--flink-master localhost:8081` on a host that is not the JobManager's: it retries
    for about a minute, then fails the job. Was: exit 6, 'the engine ended job BeamApp-... FAILED:
    java.net.ConnectException: Connection refused', naming neither the job server nor the address."""
    c = flink_hosts
    with job_server(c, 'launcher', 'misplaced-jobserver', 'localhost:8081', 8199):
        started = time.monotonic()
        done = build(c, 'launcher', '--input', corpus, '--output', f'{PREFIX}/unreached', '--runner', 'PortableRunner',
                     '--job_endpoint', 'launcher:8199', '--parallelism', '2')
        took = time.monotonic() - started
    assert done.returncode == 6, done.stderr[-3000:]
    assert error_line(done).startswith(
        'ragsieve build: error: the job server at launcher:8199 (--job_endpoint) could not reach Flink at '
        'localhost:8081 (Connection refused) from its host'), done.stderr[-3000:]
    print(f'failed in {took:.1f} s')


def test_ctrl_c_cancels_a_portable_builds_job_on_flink_through_its_rest_api(flink_hosts, corpus):
    """`--runner PortableRunner --job_endpoint jobserver:8099 --flink_master jobmanager:8081`: Ctrl-C once the job
    runs is exit 130 and the Flink job CANCELED. Was: the job server stopped its own part only, and the Flink job
    ran on (restarting until cancelled by hand, in the issue's cluster)."""
    c = flink_hosts
    before = set(jobs(c))
    log = c.hosts['launcher'].tmp / 'ctrl-c.log'
    process = c.hosts.popen('launcher', [
        sys.executable, '-m', 'pipelines.cli', 'build', '--chunk_size', '64', '--input', corpus,
        '--output', f'{PREFIX}/ctrl-c', *c.portable_flags()], log, c.store_env,
        cwd=str(REPO))
    try:
        deadline = time.monotonic() + 300
        running = []
        while not running:
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f'no job of the build ran on Flink: {log.read_text()[-3000:]}'
            running = [jid for jid, state in jobs(c).items() if jid not in before and state == 'RUNNING']
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)  # the Popen's pid is the build's: `ip netns exec` and `enter` exec
        status = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert status == 130, log.read_text()[-3000:]
    assert log.read_text().strip().splitlines()[-1] == 'ragsieve build: interrupted'
    deadline = time.monotonic() + 60
    while jobs(c)[running[0]] != 'CANCELED' and time.monotonic() < deadline:
        time.sleep(0.5)
    assert jobs(c)[running[0]] == 'CANCELED', log.read_text()[-3000:]
    assert 'Flink job' in log.read_text() and 'cancelled' in log.read_text()


def test_a_worker_command_missing_on_a_taskmanager_host_is_one_line_naming_it_and_the_host(flink_hosts, corpus):
    """taskmanager-1's install lacks the venv's bin/ (the SDK worker's command): the job fails there at each of
    the cluster's restarts. Was: minutes of restarts, then exit 6 with 'java.io.IOException: error=2, No such
    file or directory', naming neither the program nor the host."""
    c = flink_hosts

    def restart_taskmanager_1() -> None:
        processes.kill(c.daemons['taskmanager-1'])
        c.start_taskmanager(1)
        c.wait_for_taskmanagers(2)

    c.hosts.hide('taskmanager-1', os.path.join(sys.prefix, 'bin'))
    try:
        restart_taskmanager_1()
        started = time.monotonic()
        done = build(c, 'launcher', '--input', corpus, '--output', f'{PREFIX}/no-worker', *c.build_flags())
        took = time.monotonic() - started
    finally:
        c.hosts.hidden.pop('taskmanager-1')
        restart_taskmanager_1()
    assert done.returncode == 6, done.stderr[-3000:]
    command = os.path.join(sys.prefix, 'bin', 'ragsieve-sdk-worker')
    assert error_line(done).startswith(
        f'ragsieve build: error: the SDK worker command {command} cannot run on TaskManager taskmanager-1 '
        '(No such file or directory): install ragsieve at the same path on every worker host'), done.stderr[-3000:]
    print(f'failed in {took:.1f} s')


def test_a_launcher_address_the_workers_cannot_reach_is_one_line_naming_the_flag_and_the_build_goes_on(
        flink_hosts):
    """`--progress_address` names an address on the cluster's network where no host is: no count arrives. The view
    says so once the job's tasks ran 30 s without one, naming the flag; the job is not cancelled. Was: silence,
    and progress lines of zeros to the end."""
    from tests.helpers import many_documents

    c = flink_hosts
    many_documents(c.hosts['launcher'].tmp / 'many', n=1500)
    url = f'{PREFIX}/many'
    done = c.hosts.run('launcher', [
        sys.executable, '-c', 'import sys; from tests.helpers import upload; upload(sys.argv[1], sys.argv[2])',
        '/tmp/many', url], env=c.store_env, cwd=str(REPO))
    assert done.returncode == 0, done.stderr[-3000:]
    done = build(c, 'launcher', '--input', url, '--output', f'{PREFIX}/unheard', '--progress_address', '10.47.0.250',
                 *c.build_flags())
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "no worker's counts reached this launcher" in line]
    assert len(said) == 1 and 'pass --progress_address HOST[:PORT]' in said[0], done.stderr[-3000:]
