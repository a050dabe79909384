"""A Flink session cluster on 127.0.0.1: one JobManager and N TaskManagers, as real daemons.

The daemons are Flink's own entry classes started with `java`, with the JVM
and memory options Flink's `bin/` scripts compute (`BashJavaUtils`), from
the distribution in PyPI's `apache-flink-libraries` wheel.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Optional

import yaml

from engines import fetch, processes

JOBMANAGER = 'org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint'
TASKMANAGER = 'org.apache.flink.runtime.taskexecutor.TaskManagerRunner'
BASH_JAVA_UTILS = 'org.apache.flink.runtime.util.bash.BashJavaUtils'
# Beam's FlinkRunner names the Flink its job server was built for.
BEAM_FLINK_VERSION = '1.19'


@dataclasses.dataclass(frozen=True)
class FlinkSettings:
    """The cluster's size, sized for 2 cores / 24 GiB by default.

    Attributes:
      taskmanagers: TaskManager daemons.
      slots: Task slots per TaskManager (the build's parallelism is their product).
      jobmanager_memory: The JobManager's process size.
      taskmanager_memory: Each TaskManager's process size; the SDK workers
        (Python, one per TaskManager, each with its own models) are outside it.
      network_memory: Each TaskManager's network buffers: Beam's batch plans
        have many exchanges, and 160 MB (Flink's default share of 3 GB) ran
        out ("Insufficient number of network buffers: required 512").
      restart_attempts: Fixed-delay restarts of a failed job (0: none). A
        build's restarts are the cluster's (Beam's batch translation does
        not apply --number_of_execution_retries), and one lost TaskManager
        host fails a job 3 to 4 times over (measured): 10 survive two.
      restart_delay: Seconds before each: longer than the time a TaskManager
        keeps an idle SDK worker (ragsieve's --environment_cache_millis
        default, 30 s), or a job restarted after an SDK worker died gets the
        dead worker back from that cache and fails again (measured).
    """

    taskmanagers: int = 2
    slots: int = 1
    jobmanager_memory: str = '1024m'
    taskmanager_memory: str = '3072m'
    network_memory: str = '512m'
    restart_attempts: int = 10
    restart_delay: int = 45

    def __post_init__(self):
        if self.taskmanagers < 1:
            raise ValueError(f'taskmanagers={self.taskmanagers}: a cluster needs at least one TaskManager')

    @property
    def parallelism(self) -> int:
        return self.taskmanagers * self.slots


class FlinkCluster(processes.Cluster):
    """A running Flink session cluster; a context manager that stops it.

    Args:
      directory: Where its configuration, logs and temporary files go.
      settings: Its size and restart policy.
      env: Environment variables for its daemons, which their SDK workers
        inherit (OMP_NUM_THREADS, ...).
    """

    engine = fetch.FLINK

    def __init__(self, directory: Path, settings: FlinkSettings = FlinkSettings(), env: Optional[dict] = None):
        super().__init__(directory, env)
        self.settings = settings
        self.rest_port = processes.free_port()
        self._taskmanager_jvm: Optional[tuple[list[str], list[str]]] = None

    @property
    def master(self) -> str:
        """`--flink_master`: the JobManager's REST address."""
        return f'localhost:{self.rest_port}'

    @property
    def rest(self) -> str:
        return f'http://127.0.0.1:{self.rest_port}'

    def build_flags(self) -> list[str]:
        """The flags that send a build to this cluster (Beam's names)."""
        return ['--runner', 'FlinkRunner', '--flink_master', self.master, '--flink_version', BEAM_FLINK_VERSION,
                '--flink_job_server_jar', str(self.job_server),
                '--parallelism', str(self.settings.parallelism)]

    def start(self, timeout: float = 120) -> 'FlinkCluster':
        """Starts the JobManager and the TaskManagers; returns once all TaskManagers registered."""
        conf = self.directory / 'conf'
        conf.mkdir(parents=True, exist_ok=True)
        (conf / 'config.yaml').write_text(yaml.safe_dump(self.config(), sort_keys=True))
        (conf / 'log4j.properties').write_text(LOG4J)
        jvm, dynamic = self.resource_params('GET_JM_RESOURCE_PARAMS')
        self._daemon('jobmanager', jvm, JOBMANAGER, dynamic)
        for i in range(self.settings.taskmanagers):
            self.start_taskmanager(i)
        self.wait_for_taskmanagers(self.settings.taskmanagers, timeout)
        return self

    def start_taskmanager(self, i: int) -> None:
        """Starts TaskManager `i` (again, after a kill: a supervisor's restart)."""
        if self._taskmanager_jvm is None:
            self._taskmanager_jvm = self.resource_params('GET_TM_RESOURCE_PARAMS')
        jvm, dynamic = self._taskmanager_jvm
        self._daemon(f'taskmanager-{i}', jvm, TASKMANAGER, dynamic + ['-D', f'taskmanager.resource-id=tm-{i}'])

    def kill_taskmanager(self, i: int) -> None:
        """kill -9 of TaskManager `i`, as a crashed machine."""
        processes.kill(self.daemons[f'taskmanager-{i}'])

    def wait_for_taskmanagers(self, n: int, timeout: float = 120) -> None:
        def registered() -> bool:
            overview = processes.read_json(f'{self.rest}/overview')
            return bool(overview) and overview.get('taskmanagers') == n

        processes.wait_until(registered, self.daemons, self.logs, timeout, f'{n} TaskManagers registered')

    def config(self) -> dict:
        """Flink's config.yaml: loopback only, free ports, memory and restarts from the settings."""
        s = self.settings
        restart = ({'restart-strategy.type': 'fixed-delay', 'restart-strategy.fixed-delay.attempts': s.restart_attempts,
                    'restart-strategy.fixed-delay.delay': f'{s.restart_delay} s'}
                   if s.restart_attempts else {'restart-strategy.type': 'none'})
        tmp = str(self.directory / 'tmp')
        return {
            'jobmanager.rpc.address': '127.0.0.1', 'jobmanager.bind-host': '127.0.0.1',
            'jobmanager.rpc.port': processes.free_port(), 'blob.server.port': str(processes.free_port()),
            'rest.address': '127.0.0.1', 'rest.bind-address': '127.0.0.1', 'rest.port': self.rest_port,
            'taskmanager.host': '127.0.0.1', 'taskmanager.bind-host': '127.0.0.1',
            'jobmanager.memory.process.size': s.jobmanager_memory,
            'taskmanager.memory.process.size': s.taskmanager_memory,
            'taskmanager.memory.network.min': s.network_memory, 'taskmanager.memory.network.max': s.network_memory,
            'taskmanager.numberOfTaskSlots': s.slots, 'parallelism.default': s.parallelism,
            'io.tmp.dirs': tmp, 'web.tmpdir': tmp, **restart,
            # Beam's runner and its dependencies from the daemons' classpath (`beam_jars`), not each job's:
            # Beam then keeps a TaskManager's SDK workers from one stage to the next
            # (--environment_cache_millis); loaded per job, it stops and restarts them, and their models,
            # at every stage. All parent-first: a class of both (joda-time's) must not load twice.
            'classloader.resolve-order': 'parent-first',
        }

    def resource_params(self, command: str, conf: Optional[Path] = None) -> tuple[list[str], list[str]]:
        """The JVM options and `-D` settings Flink's scripts compute for a daemon from config.yaml (in `conf`,
        default the cluster's)."""
        done = subprocess.run(
            [self.java, '-cp', f'{self.dist / "bin" / "bash-java-utils.jar"}:{self.dist / "lib"}/*', BASH_JAVA_UTILS,
             command, '--configDir', str(conf or self.directory / 'conf')],
            capture_output=True, text=True, check=True)
        results = [line.split(':', 1)[1] for line in done.stdout.splitlines()
                   if line.startswith('BASH_JAVA_UTILS_EXEC_RESULT:')]
        if len(results) != 2:
            raise processes.EngineFailed(f'BashJavaUtils {command} gave no memory settings: {done.stdout[-2000:]}')
        jvm, dynamic = results
        return jvm.split(), dynamic.split()

    def _daemon(self, name: str, jvm: list[str], main: str, dynamic: list[str]) -> None:
        log = self.directory / 'log' / f'{name}.log'
        # After Flink's own jars, the job server's but Flink's and SLF4J's (see `config`).
        classpath = ':'.join([f'{self.dist / "lib"}/*', *self.beam_jars(skip=('flink-', 'slf4j-'))])
        self.launch(name, [self.java, *jvm, f'-Dlog.file={log}',
                           f'-Dlog4j.configurationFile=file:{self.directory}/conf/log4j.properties',
                           '-cp', classpath, main, '--configDir', str(self.directory / 'conf'), *dynamic],
                    self.directory / 'log' / f'{name}.out')
        self.logs[name] = log  # Flink's own log, richer than its stdout


LOG4J = '''rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
'''
