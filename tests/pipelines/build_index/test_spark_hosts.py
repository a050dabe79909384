"""The build on a Spark standalone cluster of hosts that share nothing (`spark_hosts`): the DirectRunner's bytes.

The hosts are network and mount namespaces on this machine (engines/hosts.py),
as for test_multihost.py's Flink: MinIO alone on `storage`, Spark's Master on
`spark-master`, a Worker of one core on each `spark-worker-N`. The build runs
as a user runs it, `ragsieve build --runner SparkRunner` on `launcher`, whose
job server is the Spark driver the executors on the worker hosts dial back;
input and output on s3://. Its tables are compared with the DirectRunner's
build of the same corpus on this machine. A worker host lost mid-embedding
is survived: Spark runs the lost tasks again on the other host.
"""

import json
import os
import re

import pytest

from tests.helpers import (BUCKET, PROGRESS_LOG, build_on_host, data_files, download_to_launcher, live_chunk_counts,
                           same_build, upload_from_launcher)


# Opt-in, as issue 57 asks where Spark across hosts does not fit .ci/run's 50 minutes: `make test` took 44 to 45
# minutes on 2 cores here with these two tests (4 minutes of test time, their cluster's start included, and a third
# cluster on the machine's 24 GiB beside the Flink hosts and the one-machine engines).
pytestmark = pytest.mark.skipif(
    os.environ.get('RAGSIEVE_ENGINE_FAULTS') != '1',
    reason='Spark across simulated hosts: 4 more minutes, over CI\'s budget; run with RAGSIEVE_ENGINE_FAULTS=1')

def manifest_counts(run) -> dict:
    return json.loads((run / 'manifest.json').read_text())['counts']


def executor_logs(cluster, i: int) -> list:
    """The logs of the executors Worker `i` started (one folder per application and executor), on its host."""
    return sorted(cluster.hosts[f'spark-worker-{i}'].tmp.glob('spark/work/app-*/*/stderr'))


def test_a_build_across_spark_hosts_gives_the_direct_runners_bytes_with_an_executor_on_each_worker(
        spark_hosts, sample_root):
    corpus, direct_root = sample_root
    prefix = f's3://{BUCKET}/spark-across'
    remote_corpus = upload_from_launcher(spark_hosts, corpus, f'{prefix}/corpus')
    done = build_on_host(spark_hosts, 'launcher', remote_corpus, f'{prefix}/index', 's1', *PROGRESS_LOG,
                         *spark_hosts.build_flags())
    assert done.returncode == 0, done.stderr[-3000:]
    # The SDK workers on the worker hosts send their counts to the launcher's address on its route to the master.
    assert f'the workers send them to {spark_hosts.hosts["launcher"].address}:' in done.stderr
    assert max(live_chunk_counts(done.stderr), default=0) > 0, done.stderr[-3000:]
    built = download_to_launcher(spark_hosts, f'{prefix}/index/runs/s1', 's1')
    assert same_build(data_files(built), data_files(direct_root / 'runs' / 'r1'), remote_corpus, corpus)
    assert manifest_counts(built) == manifest_counts(direct_root / 'runs' / 'r1')
    assert all(executor_logs(spark_hosts, i) for i in range(spark_hosts.settings.workers))


def hosts_running_tasks(cluster) -> list[str]:
    """The hosts where the build's driver runs a task now, as its REST API says; [] while it does not answer."""
    from engines import processes

    def look() -> list[str]:
        apps = processes.read_json(f'{cluster.driver_ui}/api/v1/applications') or []
        if not apps:
            return []
        stages = processes.read_json(f'{cluster.driver_ui}/api/v1/applications/{apps[-1]["id"]}/stages'
                                     '?status=active&details=true') or []
        return sorted({t.get('host') for s in stages for t in (s.get('tasks') or {}).values()
                       if t.get('status') == 'RUNNING'})

    return cluster.call('launcher', look)


def embedding(stderr: str) -> bool:
    """Whether the build's view shows chunks made and not all embedded yet: the stage that embeds them runs."""
    counts = [(int(m.group(1)), int(m.group(2))) for line in stderr.splitlines() if 'ragsieve.build: progress ' in line
              for m in re.finditer(r'; chunk (\d+) chunks; embed (\d+)/', line)]
    return bool(counts) and counts[-1][0] > 0 and counts[-1][1] < counts[-1][0]


def test_a_worker_host_lost_mid_embedding_is_survived_with_the_direct_runners_bytes_and_counts(
        spark_hosts, sample_root, tmp_path):
    """The host of a Worker whose executor runs a task while the view shows chunks waiting for their embeddings is
    lost (link cut, every process SIGKILLed): the Master misses its heartbeats for `WORKER_TIMEOUT`, tells the
    driver its executor is lost, and Spark runs the lost tasks again on the other Worker's executor. The build
    publishes the DirectRunner's bytes and counts, exit 0 (measured: the view stands still ~16 s, then goes on)."""
    import time

    from engines.sparkhosts import WORKER_TIMEOUT

    corpus, direct_root = sample_root
    prefix = f's3://{BUCKET}/spark-lost-worker'
    remote_corpus = upload_from_launcher(spark_hosts, corpus, f'{prefix}/corpus')
    log, master_log, lost = tmp_path / 'build.err', spark_hosts.logs['master'], []
    logged, started = len(master_log.read_text()), time.monotonic()

    def cut_once_it_embeds(_process) -> bool:
        running = [h for h in hosts_running_tasks(spark_hosts) if h.startswith('spark-worker-')]
        if not embedding(log.read_text()) or not running:
            return False
        lost.append(running[0])
        spark_hosts.cut(running[0])
        return True

    try:
        done = build_on_host(spark_hosts, 'launcher', remote_corpus, f'{prefix}/index', 'w1', *PROGRESS_LOG,
                             *spark_hosts.build_flags(), wait=cut_once_it_embeds, stderr_log=log)
    finally:
        for host in lost:
            spark_hosts.mend(host)  # the session's cluster, whole again
    assert lost and done.returncode == 0, done.stderr[-3000:]
    master_says = master_log.read_text()[logged:]
    assert f'on {lost[0]}:' in master_says and f'no heartbeat in {WORKER_TIMEOUT} seconds' in master_says
    assert 'Telling app of lost executor' in master_says, master_says[-3000:]
    built = download_to_launcher(spark_hosts, f'{prefix}/index/runs/w1', 'w1')
    assert same_build(data_files(built), data_files(direct_root / 'runs' / 'r1'), remote_corpus, corpus)
    assert manifest_counts(built) == manifest_counts(direct_root / 'runs' / 'r1')
    print(f'lost {lost[0]} host mid-embedding: exit 0 after {time.monotonic() - started:.0f} s in all')
