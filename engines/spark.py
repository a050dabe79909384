"""A Spark standalone cluster on 127.0.0.1: a master and N workers, as real daemons.

Spark's own Master and Worker classes started with `java`, from the
distribution in PyPI's `pyspark` wheel (`SPARK_HOME`), which the workers
also use to start their executors.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from engines import fetch, processes

MASTER = 'org.apache.spark.deploy.master.Master'
WORKER = 'org.apache.spark.deploy.worker.Worker'


@dataclasses.dataclass(frozen=True)
class SparkSettings:
    """The cluster's size, sized for 2 cores / 24 GiB by default.

    Attributes:
      workers: Worker daemons.
      cores: Cores each worker offers (the build's parallelism is their sum).
      worker_memory: Memory each worker offers its executors.
      executor_memory: Each executor's JVM heap; the SDK workers (Python,
        with their own models) are outside it.
    """

    workers: int = 1
    cores: int = 2
    worker_memory: str = '6g'
    executor_memory: str = '3g'

    def __post_init__(self):
        if self.workers < 1:
            raise ValueError(f'workers={self.workers}: a cluster needs at least one worker')

    @property
    def parallelism(self) -> int:
        return self.workers * self.cores


class SparkCluster(processes.Cluster):
    """A running Spark standalone cluster; a context manager that stops it.

    Args:
      directory: Where its logs, work and temporary files go.
      settings: Its size.
      env: Environment variables for its daemons, which their executors and
        SDK workers inherit (OMP_NUM_THREADS, ...).
    """

    engine = fetch.SPARK

    def __init__(self, directory: Path, settings: SparkSettings = SparkSettings(), env: Optional[dict] = None):
        super().__init__(directory, env)
        self.settings = settings
        self.home = self.dist  # SPARK_HOME
        self.port = processes.free_port()
        self.ui_port = processes.free_port()

    @property
    def master_url(self) -> str:
        """`--spark_master_url`."""
        return f'spark://127.0.0.1:{self.port}'

    @property
    def ui(self) -> str:
        return f'http://127.0.0.1:{self.ui_port}'

    def build_flags(self) -> list[str]:
        """The flags that send a build to this cluster (Beam's names)."""
        return ['--runner', 'SparkRunner', '--spark_master_url', self.master_url,
                '--spark_job_server_jar', str(self.job_server),
                *(f'--job_server_jvm_properties=-D{k}={v}' for k, v in self.driver_properties().items())]

    def driver_properties(self) -> dict:
        """The Spark properties of a build's driver (the job server Beam starts), its executors' among them."""
        return {'spark.executor.memory': self.settings.executor_memory,
                # Beam's jars before Spark's on executors too, as in the job server's launcher: Spark
                # ships Guava 14, on which Beam's GCS support, loaded with its filesystems, fails every
                # first task of a job (NoSuchMethodError in Preconditions.checkState).
                'spark.executor.extraClassPath': f'{fetch.executor_jars()}/*',
                'spark.default.parallelism': self.settings.parallelism,
                'spark.local.dir': self.directory / 'tmp'}

    def start(self, timeout: float = 120) -> 'SparkCluster':
        """Starts the master and the workers; returns once all workers are alive."""
        self._daemon('master', MASTER, ['--host', '127.0.0.1', '--port', str(self.port),
                                        '--webui-port', str(self.ui_port)])
        for i in range(self.settings.workers):
            self.start_worker(i)
        self.wait_for_workers(self.settings.workers, timeout)
        return self

    def start_worker(self, i: int) -> None:
        """Starts worker `i` (again, after a kill: a supervisor's restart)."""
        self._daemon(f'worker-{i}', WORKER, [
            '--host', '127.0.0.1', '--webui-port', str(processes.free_port()),
            '--cores', str(self.settings.cores), '--memory', self.settings.worker_memory,
            '--work-dir', str(self.directory / f'work-{i}'), self.master_url])

    def kill_worker(self, i: int) -> None:
        """kill -9 of worker `i`, as a crashed machine: its executors, left alone, exit when they notice."""
        processes.kill(self.daemons[f'worker-{i}'])

    def master_state(self) -> Optional[dict]:
        """The master's view of the cluster (its web UI's `/json/`: workers, applications); None while it does
        not answer."""
        return processes.read_json(f'{self.ui}/json/')

    def wait_for_workers(self, n: int, timeout: float = 120) -> None:
        def alive() -> bool:
            state = self.master_state()
            return bool(state) and sum(w.get('state') == 'ALIVE' for w in state.get('workers', [])) == n

        processes.wait_until(alive, self.daemons, self.logs, timeout, f'{n} Spark workers alive')

    def daemon_command(self, main: str, args: list[str], properties: Optional[dict] = None) -> list[str]:
        """The `java` command of a Spark daemon (`MASTER`, `WORKER`), with Spark `properties` as `-D`s."""
        return [self.java, '-Xmx1g', *(f'-D{k}={v}' for k, v in (properties or {}).items()),
                '-cp', f'{self.home / "jars"}/*', main, *args]

    def daemon_env(self, local_ip: str, directory: Path) -> dict:
        """A Spark daemon's environment: its address, and its scratch and logs under `directory`."""
        # SPARK_SCALA_VERSION as Spark's bin/load-spark-env.sh sets it: without it a worker's launcher
        # looks for a source tree's build directories to start its executors from.
        return {'SPARK_HOME': str(self.home), 'SPARK_SCALA_VERSION': '2.12', 'SPARK_LOCAL_IP': local_ip,
                'SPARK_LOCAL_DIRS': str(directory / 'tmp'), 'SPARK_LOG_DIR': str(directory / 'log')}

    def _daemon(self, name: str, main: str, args: list[str]) -> None:
        self.launch(name, self.daemon_command(main, args), self.directory / 'log' / f'{name}.log',
                    self.daemon_env('127.0.0.1', self.directory))
