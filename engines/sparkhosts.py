"""MinIO and a Spark standalone cluster on simulated hosts that share nothing (`engines.hosts`).

Hosts: `storage` (MinIO, as `engines.multihost` runs it), `spark-master`
(Spark's Master at spark://spark-master:7077, its web UI at 8080),
`spark-worker-0`, `spark-worker-1`, ... (a Worker each, one core by default,
so that a job's tasks spread over the hosts), and `launcher`, where builds
are started. A SparkRunner build on `launcher` starts Beam's Spark job
server there, and that JVM is the job's Spark driver (client mode): the
executors on the worker hosts dial it back at `launcher`, on fixed ports
(`DRIVER_PORT`, `BLOCK_MANAGER_PORT`: those a firewall between the hosts
would open), and start the build's SDK workers (a PROCESS environment) on
their own hosts. Those inherit the Worker's environment (a Worker starts
its executors with its own), which carries the store's settings
(`multihost.STORE_ENV`), as a cluster's machines carry their store's.

The daemons are started as `engines.spark.SparkCluster` starts them (the
same classes, classpath and executor settings), each on its host, with
its scratch and logs under the host's /tmp/spark; a log is readable from
this machine through `Host.outside`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from engines import hosts, multihost, objectstores, processes, spark

MASTER_PORT, MASTER_UI_PORT, WORKER_UI_PORT = 7077, 8080, 8081
DRIVER_PORT, BLOCK_MANAGER_PORT, DRIVER_UI_PORT = 7078, 7079, 4040
SPARK_DIR = Path('/tmp/spark')
# Seconds without a Worker's heartbeat before the Master drops it and tells the driver its executors are lost
# (Spark's default, 60, is checked every 60 s: a lost host's tasks would wait up to two minutes to run again).
WORKER_TIMEOUT = 15


def host_names(workers: int) -> list[str]:
    return ['storage', 'spark-master', *(f'spark-worker-{i}' for i in range(workers)), 'launcher']


class SparkHosts(multihost.ClusterOnHosts, spark.SparkCluster):
    """MinIO and a Spark standalone cluster on simulated hosts; a context manager that removes all of it.

    The daemons are named as `SparkCluster`'s (`master`, `worker-0`, ...),
    each on the host of its name with `spark-` before it.

    Args:
      directory: Where the hosts' disks go.
      settings: The cluster's size (`settings.workers` hosts of a Worker, each of `settings.cores`).
      owner: As `hosts.Hosts`'s (None for a cluster that outlives its command).
      env: More environment for the daemons, their executors and SDK workers (OMP_NUM_THREADS, ...).

    Raises:
      hosts.HostsUnavailable: Where this machine cannot make namespaces.
      engines.fetch.EngineMissing: Without Java, pyspark, Beam's Spark job server or MinIO.
    """

    log_dir = str(SPARK_DIR / 'log')

    def __init__(self, directory: Path, settings: spark.SparkSettings = spark.SparkSettings(workers=2, cores=1),
                 owner: Optional[int] = -1, env: Optional[dict] = None):
        why = hosts.available()
        if why:
            raise hosts.HostsUnavailable(why)
        self.minio = objectstores.binary(objectstores.MINIO)
        super().__init__(Path(directory), settings, {**multihost.STORE_ENV, **(env or {})})
        self.port, self.ui_port = MASTER_PORT, MASTER_UI_PORT
        self.hosts = hosts.Hosts(self.directory, host_names(settings.workers), owner)

    @property
    def master_url(self) -> str:
        """`--spark_master_url`, as the launcher (and every host) resolves it."""
        return f'spark://spark-master:{MASTER_PORT}'

    @property
    def ui(self) -> str:
        """The Master's web UI from a thread in a host's namespace (`call`): host names resolve only inside hosts."""
        return f'http://{self.hosts["spark-master"].address}:{MASTER_UI_PORT}'

    @property
    def driver_ui(self) -> str:
        """The web UI of a build's driver on `launcher`, from a thread in a host's namespace (`call`)."""
        return f'http://{self.hosts["launcher"].address}:{DRIVER_UI_PORT}'

    def driver_properties(self) -> dict:
        """SparkCluster's, with the driver on `launcher`: executors dial it by that name, at fixed ports, and its
        web UI at a known one (one build at a time runs there); its scratch on the launcher's own disk."""
        return {**super().driver_properties(), 'spark.local.dir': SPARK_DIR / 'tmp',
                'spark.driver.host': 'launcher', 'spark.driver.bindAddress': '0.0.0.0',
                'spark.driver.port': DRIVER_PORT, 'spark.blockManager.port': BLOCK_MANAGER_PORT,
                'spark.ui.port': DRIVER_UI_PORT}

    def master_state(self) -> Optional[dict]:
        """SparkCluster's, read from the launcher host."""
        return self.call('launcher', processes.read_json, f'{self.ui}/json/')

    def start(self, timeout: float = 180) -> 'SparkHosts':
        """Makes the hosts, starts MinIO, the Master and the Workers; returns once every Worker is alive."""
        self.hosts.start()
        self._start_minio()
        self._start_master()
        for i in range(self.settings.workers):
            self.start_worker(i)
        self.wait_for_workers(self.settings.workers, timeout)
        return self

    def start_worker(self, i: int) -> None:
        """Starts Worker `i` on host `spark-worker-i` (again, after its host was mended)."""
        self._daemon(f'worker-{i}', spark.WORKER, [
            '--host', f'spark-worker-{i}', '--webui-port', str(WORKER_UI_PORT), '--cores', str(self.settings.cores),
            '--memory', self.settings.worker_memory, '--work-dir', str(SPARK_DIR / 'work'), self.master_url])

    def daemon_of(self, host: str) -> str:
        return 'minio' if host == 'storage' else host.removeprefix('spark-')

    def mend(self, host: str, timeout: float = 180) -> None:
        """`host` is back, its daemon started again: MinIO with the data its disk kept, a Worker; the Master, with
        every Worker alive again (one that exited is started again). Returns once every Worker is alive: the
        Master counts a lost Worker until `WORKER_TIMEOUT` passed without its heartbeat."""
        self.hosts.mend(host)
        if host == 'storage':
            self._start_minio()
            return
        if host == 'spark-master':
            self._start_master()
            for i in range(self.settings.workers):
                if self.daemons[f'worker-{i}'].poll() is not None:
                    self.start_worker(i)
        elif host.startswith('spark-worker-'):
            self.start_worker(int(host.rsplit('-', 1)[1]))
        self.wait_for_workers(self.settings.workers, timeout)

    def _start_master(self) -> None:
        self._daemon('master', spark.MASTER, ['--host', 'spark-master', '--port', str(MASTER_PORT),
                                              '--webui-port', str(MASTER_UI_PORT)],
                     {'spark.worker.timeout': WORKER_TIMEOUT})

    def _daemon(self, name: str, main: str, args: list[str], properties: Optional[dict] = None) -> None:
        host = f'spark-{name}'
        self.launch_on(host, name, self.daemon_command(main, args, properties),
                       self.daemon_env(self.hosts[host].address, SPARK_DIR))
