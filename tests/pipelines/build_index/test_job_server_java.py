"""`ragsieve-java`: the job server Beam starts for a build dies with the build, even one killed by SIGKILL."""

import os
import subprocess
import sys
import textwrap
import time

import pytest
from apache_beam.options.pipeline_options import JobServerOptions, PipelineOptions

from pipelines.build_index import runners
from tests.helpers import REPO

# The build's stand-in: a process that starts a child as Beam starts its job server and waits. The child (Python
# here, where java would serve) asks what `ragsieve-java` asks, then prints its pid (through the pipe it
# inherited) and sleeps.
PARENT = textwrap.dedent('''
    import subprocess, sys, time
    subprocess.Popen([sys.executable, '-c', """
    import os, time
    from pipelines.build_index.job_server_java import die_with_parent
    assert die_with_parent(os.getppid())
    print(os.getpid(), flush=True)
    time.sleep(600)
    """])
    time.sleep(600)
''')


def alive(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as stat:
            return stat.read().split(')')[-1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='PR_SET_PDEATHSIG is Linux only')
def test_a_child_that_asked_dies_when_its_parent_is_killed_with_sigkill():
    parent = subprocess.Popen([sys.executable, '-c', PARENT], stdout=subprocess.PIPE, text=True, cwd=REPO)
    child = int(parent.stdout.readline())
    assert alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 60  # the kernel signals at once; a loaded machine schedules the exit later
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child)


def test_a_flink_or_spark_build_starts_its_job_server_under_ragsieve_java_unless_told_otherwise(monkeypatch):
    monkeypatch.setattr(runners.os, 'access', lambda path, mode: True)
    expected = os.path.join(os.path.dirname(sys.executable), runners.JOB_SERVER_JAVA)
    for runner in ('FlinkRunner', 'SparkRunner'):
        options = runners.with_job_server_dying_with_the_build(PipelineOptions(['--runner', runner]))
        assert options.view_as(JobServerOptions).job_server_java_launcher == expected
    own = runners.with_job_server_dying_with_the_build(
        PipelineOptions(['--runner', 'FlinkRunner', '--job_server_java_launcher', '/opt/jdk/bin/java']))
    assert own.view_as(JobServerOptions).job_server_java_launcher == '/opt/jdk/bin/java'
    portable = runners.with_job_server_dying_with_the_build(PipelineOptions(['--runner', 'PortableRunner']))
    assert portable.view_as(JobServerOptions).job_server_java_launcher == 'java'

