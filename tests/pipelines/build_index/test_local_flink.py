"""`--runner FlinkRunner` with no cluster: ragsieve's own Flink on this machine, byte for byte the DirectRunner's.

Real daemons from what `make engines` installed (the Flink wheel, Beam's
job server); the builds run as a user runs them, in a process of their own.
Skips, saying what to install, where Flink or its job server is missing
(fails instead in CI, RAGSIEVE_REQUIRE_ENGINES=1).
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines.build_index import local_engine, local_flink
from tests.helpers import REPO, data_files, engine_missing


@pytest.fixture
def installed():
    try:
        local_flink.flink_distribution()
        local_flink.java()
    except local_flink.ClusterFailed as e:
        engine_missing(str(e))
    if not local_engine.flink_job_server_jar().is_file():
        engine_missing(f'no Flink job server at {local_engine.flink_job_server_jar()}: run `make engines`')


def build(corpus, output, tmp, *flags):
    """`ragsieve build --runner FlinkRunner` in its own process, its temporary files under `tmp`."""
    return subprocess.Popen(
        [sys.executable, '-m', 'pipelines.cli', 'build', '--input', str(corpus), '--output', str(output),
         '--chunk_size', '64', '--runner', 'FlinkRunner', '--progress', 'log', '--progress_interval', '1', *flags],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, 'TMPDIR': str(tmp)})


def daemons_of(directory) -> list[int]:
    """The pids of processes whose command line names `directory` (the local cluster's daemons)."""
    found = subprocess.run(['pgrep', '-f', str(directory)], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def test_the_local_flink_builds_the_direct_runners_bytes_and_leaves_nothing(installed, sample_root, tmp_path):
    corpus, root = sample_root
    tmp = tmp_path / 'tmp'
    tmp.mkdir()
    process = build(corpus, tmp_path / 'out', tmp, '--parallelism', '3')  # more partitions than slots: in waves
    _, err = process.communicate(timeout=900)
    assert process.returncode == 0, err[-3000:]
    assert data_files(tmp_path / 'out') == data_files(root / 'runs' / 'r1')
    # Its cluster, its configuration and what it spilled are gone with the build.
    assert not [name for name in os.listdir(tmp) if name.startswith('ragsieve-flink-')]
    assert daemons_of(tmp) == []


def test_a_killed_launcher_takes_its_local_flink_with_it(installed, sample_root, tmp_path):
    corpus, _ = sample_root
    tmp = tmp_path / 'tmp'
    tmp.mkdir()
    process = build(corpus, tmp_path / 'out', tmp)
    deadline = time.monotonic() + 300
    while not any(name.startswith('ragsieve-flink-') for name in os.listdir(tmp)) or len(daemons_of(tmp)) < 2:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.5)
    process.send_signal(signal.SIGKILL)
    process.wait()
    # The kernel kills each daemon as its parent dies (PR_SET_PDEATHSIG): waited for, not timed.
    while daemons_of(tmp):
        assert time.monotonic() < deadline
        time.sleep(0.5)
