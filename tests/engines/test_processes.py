"""A daemon's start: a taken port is seen in its log at once, not after the readiness timeout."""

import socket

import pytest

from engines import fetch, processes
from tests.helpers import engine_missing

SPARK_RETRY = ("WARN Utils: Service 'sparkMaster' could not bind on port 7077. Attempting port 7078.")
JAVA_BIND = 'java.net.BindException: Address already in use'


def test_a_bind_failure_is_found_in_a_log():
    assert processes.bind_failure(f'INFO starting\n{SPARK_RETRY}\nINFO more') == SPARK_RETRY
    assert processes.bind_failure(f'ERROR  Could not start rest endpoint\n\t{JAVA_BIND}\n') == JAVA_BIND
    assert processes.bind_failure('INFO Successfully started service on port 7077\n') is None


def test_wait_until_fails_at_once_when_a_daemon_logs_a_taken_port(tmp_path):
    log = tmp_path / 'master.log'
    log.write_text(f'{SPARK_RETRY}\n')

    class Running:
        returncode = None

        def poll(self):
            return None

    looks = []

    def ready():
        looks.append(1)
        return False

    with pytest.raises(processes.EngineFailed, match=f"master could not bind a port of its .*see {log}"):
        processes.wait_until(ready, {'master': Running()}, {'master': log}, 120, 'the master alive')
    assert len(looks) == 1  # at its first look, not at the timeout


def test_a_spark_master_on_a_taken_port_fails_its_start_at_once(tmp_path):
    """The real daemon (about 10 s): Spark moves to the next port, and the start says so instead of waiting."""
    from engines.spark import SparkCluster

    try:
        cluster = SparkCluster(tmp_path)
    except fetch.EngineMissing as e:
        engine_missing(str(e))
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        cluster.port = taken.getsockname()[1]
        try:  # the error names the port, not the timeout ("no ... after 120 s"): it came at once
            with pytest.raises(processes.EngineFailed, match=f'master could not bind a port of its .*{cluster.port}'):
                cluster.start(timeout=120)
        finally:
            cluster.stop()
