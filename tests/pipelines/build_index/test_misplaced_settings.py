"""Settings that only work on the launcher's host, tried on a cluster of hosts that share nothing (`flink_hosts`).

Each build runs as a user runs it, `python -m pipelines.cli build ...`, on
a simulated host (`launcher`, or the JobManager's or the store's host), so
exit statuses and lines are the real ones. A setting the workers on other
hosts cannot use is one line naming it, before the job starts where that
can be known then (no Flink job is submitted); a job server that cannot
reach Flink is one line naming both after the job server gave up.
"""

import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from engines import processes
from tests.helpers import BUCKET, REPO

PREFIX = f's3://{BUCKET}/misplaced'
# The refusal every misplaced path ends in.
SHARED_STORAGE = 'it must be on storage every worker reaches (s3://, gs://, or a shared mount)'
# The harness's job server listens on 0.0.0.0 and gives that as its artifact service's host: named here.
ARTIFACTS = ('--artifact_endpoint', 'jobserver:8098')


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
    return done.stderr.strip().splitlines()[-1]


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
                 *ARTIFACTS, '--flink_master', 'localhost:8081')
    assert done.returncode == 2, done.stderr[-3000:]
    assert error_line(done).startswith(
        'ragsieve build: error: --flink_master localhost:8081: a loopback address, but the job server at '
        'jobserver:8099 (--job_endpoint) runs on another host')
    assert jobs(c) == before


def test_a_job_server_that_gives_a_wildcard_artifact_address_is_one_line_naming_the_flag_to_pass(flink_hosts, corpus):
    """A job server started with `--job-host 0.0.0.0` gives 0.0.0.0:8098 for staging the job's artifacts: the launcher
    dials its own host. Was: exit 1, gRPC's traceback (`ipv4:0.0.0.0:8098: ... Connection refused`)."""
    c = flink_hosts
    before = jobs(c)
    done = build(c, 'launcher', '--input', corpus, '--output', f'{PREFIX}/wildcard', *c.portable_flags())
    assert done.returncode == 2, done.stderr[-3000:]
    assert error_line(done) == (
        "ragsieve build: error: the job server at jobserver:8099 (--job_endpoint) gave 0.0.0.0:8098 as its artifact "
        "service's address, which names no host (UNAVAILABLE): pass --artifact_endpoint jobserver:8098, or start the "
        "job server with --job-host set to its host's name")
    assert jobs(c) == before


def answers(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=2).close()
        return True
    except OSError:
        return False


def test_a_job_server_that_cannot_reach_flink_ends_the_build_in_one_line_naming_both(flink_hosts, corpus):
    """A job server started with `--flink-master localhost:8081` on a host that is not the JobManager's: it retries
    for about a minute, then fails the job. Was: exit 6, 'the engine ended job BeamApp-... FAILED:
    java.net.ConnectException: Connection refused', naming neither the job server nor the address."""
    c = flink_hosts
    name = 'misplaced-jobserver'
    c.launch_on('launcher', name, [c.java, '-jar', str(c.job_server), '--flink-master', 'localhost:8081',
                                   '--job-host', '0.0.0.0', '--job-port', '8199', '--artifact-port', '8198',
                                   '--expansion-port', '8197'])
    try:
        processes.wait_until(lambda: c.call('launcher', answers, c.hosts['launcher'].address, 8199),
                             {name: c.daemons[name]}, {name: c.logs[name]}, 120, 'job server listening')
        started = time.monotonic()
        done = build(c, 'launcher', '--input', corpus, '--output', f'{PREFIX}/unreached', '--runner', 'PortableRunner',
                     '--job_endpoint', 'launcher:8199', '--parallelism', '2')
        took = time.monotonic() - started
    finally:
        processes.stop(c.daemons.pop(name))
        c.logs.pop(name)
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
        '--output', f'{PREFIX}/ctrl-c', *c.portable_flags(), *ARTIFACTS, '--flink_master', c.master], log, c.store_env,
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
