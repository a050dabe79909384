"""A Flink session cluster on this machine for one build: a JobManager and a TaskManager, gone when it ends.

The daemons are Flink's own entry classes started with `java` and the
memory options Flink's `bin/` scripts compute (`BashJavaUtils`), from the
distribution in PyPI's `apache-flink-libraries` wheel (the `flink` extra,
installed by `make engines`), with Beam's runner jars on their classpath
(the job server's, assembled by `make engines`), loaded parent-first so a
TaskManager keeps its SDK workers from one stage to the next. Each daemon
is killed with the launcher (PR_SET_PDEATHSIG): a build killed by SIGKILL
or the OOM killer leaves no cluster behind. engines/flink.py starts the
same kind of cluster for the tests and benchmarks, apart from the build.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Optional

import yaml

JOBMANAGER = 'org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint'
TASKMANAGER = 'org.apache.flink.runtime.taskexecutor.TaskManagerRunner'
BASH_JAVA_UTILS = 'org.apache.flink.runtime.util.bash.BashJavaUtils'
# Sized for a build on a machine of a few cores: Flink's own heaps and buffers; the SDK workers (Python, with the
# models) are outside them. Beam's batch plans have ~140 operators and many exchanges: the TaskManager's network
# buffers hold them (Flink's default share ran out: "Insufficient number of network buffers: required 512"). The
# JobManager schedules ~140 tasks per partition (3,200 at 300k chunks: it spent 458 CPU seconds in a 192 MB heap).
JOBMANAGER_MEMORY = '1536m'
TASKMANAGER_MEMORY = '4096m'
NETWORK_MEMORY = '384m'
MANAGED_MEMORY = '512m'
SORT_SHUFFLE_BUFFERS = 64
TASK_OFF_HEAP = '768m'
START_SECONDS = 120
# What Flink's own scripts give its daemons on Java 17 (env.java.default-opts.all): without them a task's
# OutOfMemoryError could not be reported (InaccessibleObjectException on Throwable.detailMessage) and took the
# TaskManager down with an IllegalStateException instead.
JAVA_17_OPENS = ['--add-exports=java.base/sun.net.util=ALL-UNNAMED',
                 '--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED',
                 *(f'--add-opens=java.base/{package}=ALL-UNNAMED' for package in (
                     'java.lang', 'java.net', 'java.io', 'java.nio', 'sun.nio.ch', 'java.lang.reflect', 'java.text',
                     'java.time', 'java.util', 'java.util.concurrent', 'java.util.concurrent.atomic',
                     'java.util.concurrent.locks'))]
_PR_SET_PDEATHSIG = 1
# Loaded before any fork: the child runs nothing but this call between fork and exec.
_LIBC = ctypes.CDLL(None, use_errno=True)


class ClusterFailed(ValueError):
    """The local cluster cannot start (no Flink, no java, a daemon that exited or did not come up): one line
    naming its log, exit status 2."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def flink_distribution() -> Path:
    """The Flink distribution of the `apache-flink-libraries` wheel (its lib/ and bin/).

    Raises:
      ClusterFailed: If the wheel is not installed.
    """
    spec = importlib.util.find_spec('pyflink')
    if spec is None or not spec.submodule_search_locations:
        raise ClusterFailed("--runner FlinkRunner starts a Flink on this machine and Flink is not installed: run "
                            "`make engines` (pip install 'ragsieve[flink]')")
    return Path(list(spec.submodule_search_locations)[0])


def java() -> str:
    found = shutil.which('java', path=os.path.join(os.environ['JAVA_HOME'], 'bin')) if os.environ.get(
        'JAVA_HOME') else None
    found = found or shutil.which('java')
    if not found:
        raise ClusterFailed('--runner FlinkRunner starts a Flink on this machine and there is no java on PATH: '
                            'install a JDK 17')
    return found


def config(slots: int, spill: Path, rest_port: int) -> dict:
    """The cluster's config.yaml: loopback only, free ports, bounded memory, spills under `spill`."""
    return {
        'jobmanager.rpc.address': '127.0.0.1', 'jobmanager.bind-host': '127.0.0.1',
        'jobmanager.rpc.port': free_port(), 'blob.server.port': str(free_port()),
        'rest.address': '127.0.0.1', 'rest.bind-address': '127.0.0.1', 'rest.port': rest_port,
        'taskmanager.host': '127.0.0.1', 'taskmanager.bind-host': '127.0.0.1',
        'jobmanager.memory.process.size': JOBMANAGER_MEMORY,
        'taskmanager.memory.process.size': TASKMANAGER_MEMORY,
        'taskmanager.memory.network.min': NETWORK_MEMORY, 'taskmanager.memory.network.max': NETWORK_MEMORY,
        'taskmanager.memory.managed.size': MANAGED_MEMORY,
        # Beam's gRPC (Netty) receives the SDK workers' outputs, messages of up to 10 MB, in direct buffers: task
        # off-heap memory to Flink. Without it a 300k-chunk job failed ("OutOfMemoryError: Direct buffer memory").
        'taskmanager.memory.task.off-heap.size': TASK_OFF_HEAP,
        # Blocking exchanges (BATCH_FORCED) are sort-shuffled: a stage of ten outputs writes ten partitions, each
        # asking Flink's default 512 buffers at least ("Insufficient number of network buffers: required 512").
        'taskmanager.network.sort-shuffle.min-buffers': SORT_SHUFFLE_BUFFERS,
        'taskmanager.numberOfTaskSlots': slots, 'parallelism.default': slots,
        'io.tmp.dirs': str(spill), 'web.tmpdir': str(spill),
        # Flink's REST API copies the whole job for each look at it (10,000 tasks at a million chunks): one copy
        # serves the looks of 10 s.
        'web.refresh-interval': 10_000,
        # A failed task fails the build at once: on one machine a restart meets the same cause.
        'restart-strategy.type': 'none',
        # Beam's runner from the daemons' classpath, not each job's, so SDK workers outlive a stage; all
        # parent-first: a class of both (joda-time's) must not load twice.
        'classloader.resolve-order': 'parent-first',
    }


LOG4J = '''rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
# At DEBUG, Beam's process manager gives the SDK workers the TaskManager's stdout and stderr (taskmanager.out)
# instead of /dev/null: a worker that dies says why there.
logger.process.name = org.apache.beam.runners.fnexecution.environment.ProcessManager
logger.process.level = DEBUG
'''


def _die_with_parent() -> None:
    """In the daemon, before exec: SIGKILL when the launcher dies, however it dies."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class SessionCluster:
    """A JobManager and one TaskManager of `slots` slots under `directory`; a context manager that stops them.

    Args:
      directory: Its configuration and spill directory (the caller removes it).
      logs: Where its daemons' logs go (the caller keeps them where the build failed).
      beam_jars: Beam's runner jars for the daemons' classpath.
      slots: The TaskManager's slots (tasks at once).
    """

    def __init__(self, directory: Path, logs: Path, beam_jars: list[Path], slots: int):
        self.directory = Path(directory)
        self.logs = Path(logs)
        self.beam_jars = beam_jars
        self.slots = slots
        self.dist = flink_distribution()
        self.java = java()
        self.rest_port = free_port()
        self.daemons: dict[str, subprocess.Popen] = {}

    @property
    def master(self) -> str:
        """`--flink_master`: the JobManager's REST address."""
        return f'localhost:{self.rest_port}'

    @property
    def spill(self) -> Path:
        return self.directory / 'spill'

    def log(self, name: str) -> Path:
        return self.logs / f'{name}.log'

    def start(self) -> 'SessionCluster':
        """Starts both daemons; returns once the TaskManager registered.

        Raises:
          ClusterFailed: Naming the daemon that exited, or what did not happen in time, and its log.
        """
        conf = self.directory / 'conf'
        conf.mkdir(parents=True, exist_ok=True)
        self.spill.mkdir(exist_ok=True)
        (conf / 'config.yaml').write_text(yaml.safe_dump(config(self.slots, self.spill, self.rest_port),
                                                         sort_keys=True))
        (conf / 'log4j.properties').write_text(LOG4J)
        self._daemon('jobmanager', 'GET_JM_RESOURCE_PARAMS', JOBMANAGER, [])
        self._daemon('taskmanager', 'GET_TM_RESOURCE_PARAMS', TASKMANAGER, [])
        deadline = time.monotonic() + START_SECONDS
        while self._taskmanagers() != 1:
            for name, process in self.daemons.items():
                if process.poll() is not None:
                    raise ClusterFailed(f'the local Flink\'s {name} exited with status {process.returncode} as it '
                                        f'started: see {self.log(name)}')
            if time.monotonic() > deadline:
                raise ClusterFailed(f'the local Flink\'s TaskManager did not register in {START_SECONDS} s: see '
                                    f'{self.log("taskmanager")}')
            time.sleep(0.5)
        return self

    def _taskmanagers(self) -> Optional[int]:
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{self.rest_port}/overview', timeout=5) as answer:
                return json.load(answer).get('taskmanagers')
        except (OSError, ValueError):
            return None

    def _daemon(self, name: str, resources: str, main: str, dynamic: list[str]) -> None:
        conf = self.directory / 'conf'
        done = subprocess.run(
            [self.java, '-cp', f'{self.dist / "bin" / "bash-java-utils.jar"}:{self.dist / "lib"}/*', BASH_JAVA_UTILS,
             resources, '--configDir', str(conf)], capture_output=True, text=True)
        results = [line.split(':', 1)[1] for line in done.stdout.splitlines()
                   if line.startswith('BASH_JAVA_UTILS_EXEC_RESULT:')]
        if done.returncode or len(results) != 2:
            raise ClusterFailed(f'Flink computed no memory settings for its {name}: '
                                f'{(done.stdout + done.stderr).strip()[-500:]}')
        jvm, computed = results[0].split(), results[1].split()
        # After Flink's own jars, Beam's but Flink's and SLF4J's.
        classpath = ':'.join([f'{self.dist / "lib"}/*', *(str(p) for p in self.beam_jars
                                                        if not p.name.startswith(('flink-', 'slf4j-')))])
        log = self.log(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        command = [self.java, *jvm, *JAVA_17_OPENS, f'-Dlog.file={log}',
                   f'-Dlog4j.configurationFile=file:{conf}/log4j.properties',
                   '-cp', classpath, main, '--configDir', str(conf), *computed, *dynamic]
        with open(self.logs / f'{name}.out', 'ab') as out:
            self.daemons[name] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, start_new_session=True,
                                                  preexec_fn=_die_with_parent)

    def stop(self, grace: float = 20) -> None:
        """Stops the daemons and what they started (SDK workers): SIGTERM to each group, SIGKILL after `grace` s."""
        for process in reversed(list(self.daemons.values())):
            if process.poll() is None:
                _signal_group(process, signal.SIGTERM)
                try:
                    process.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
            _signal_group(process, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> 'SessionCluster':
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
