"""A Flink session cluster across simulated hosts that share nothing (`engines.hosts`), MinIO on its own host.

Hosts: `storage` (MinIO), `jobmanager`, `jobserver` (Beam's Flink job
server, for `--runner PortableRunner --job_endpoint jobserver:8099`),
`taskmanager-0`, `taskmanager-1`, ... (one slot each by default), and
`launcher`, where builds are started. The daemons listen at Flink's, Beam's
and MinIO's usual ports (each host has its own), read their configuration
from their host's /tmp and log there; a log is readable from this machine
through `Host.outside`.

The daemons are started as `engines.flink.FlinkCluster` starts them (the
same configuration, memory settings and classpath), each on its host.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

import yaml

from engines import flink, hosts, objectstores, processes

REST_PORT, RPC_PORT, BLOB_PORT, DATA_PORT = 8081, 6123, 6124, 6121
JOB_PORT, ARTIFACT_PORT, EXPANSION_PORT = 8099, 8098, 8097
MINIO_PORT = 9000
CONF, LOG = '/tmp/flink/conf', '/tmp/flink/log'
CHECKOUT = Path(__file__).resolve().parent.parent
# What an S3 client on any host needs to reach MinIO on `storage`.
STORE_ENV = {'AWS_ACCESS_KEY_ID': objectstores.MINIO_USER, 'AWS_SECRET_ACCESS_KEY': objectstores.MINIO_PASSWORD,
             'AWS_REGION': 'us-east-1', 'AWS_ENDPOINT_URL_S3': f'http://storage:{MINIO_PORT}'}


# The daemon each host runs, by its name in `daemons` (a TaskManager's host runs the TaskManager of its name).
DAEMONS = {'storage': 'minio', 'jobmanager': 'jobmanager', 'jobserver': 'jobserver'}


def host_names(taskmanagers: int) -> list[str]:
    return ['storage', 'jobmanager', 'jobserver', *(f'taskmanager-{i}' for i in range(taskmanagers)), 'launcher']


class ClusterOnHosts:
    """What an engine's cluster on simulated hosts has whatever the engine: MinIO on `storage`, daemons started on
    a host, calls from inside one, a host lost and its daemon reaped, the hosts removed with the cluster.

    Mixed in before the engine's cluster class (a `processes.Cluster`, whose `daemons`, `logs` and `env` it
    uses); the subclass sets `hosts`, `minio` and `log_dir` and says which daemon runs on a host (`daemon_of`).
    """

    hosts: hosts.Hosts
    minio: Path
    log_dir: str  # where a daemon's output goes on its host

    @property
    def store_env(self) -> dict:
        """What an S3 client on any host needs to reach MinIO on `storage` (the daemons and SDK workers get it)."""
        return STORE_ENV

    def daemon_of(self, host: str) -> str:
        """The name in `daemons` of the daemon `host` runs."""
        raise NotImplementedError

    def cut(self, host: str) -> None:
        """`host` is lost: its link is cut and all its processes are SIGKILLed (its daemon reaped)."""
        self.hosts.cut(host)
        daemon = self.daemons.get(self.daemon_of(host))
        if daemon is not None:
            daemon.wait()

    def call(self, host: str, function: Callable, *args):
        """`function(*args)` in a thread inside `host`'s network namespace (its sockets are the host's)."""
        return hosts.call_in(self.hosts[host].namespace, function, *args)

    def launch_on(self, host: str, name: str, command: Sequence[str], env: Optional[dict] = None) -> None:
        """Starts daemon `name` on `host`, its output into the host's `log_dir`/NAME.out."""
        self.logs[name] = self.hosts[host].outside(f'{self.log_dir}/{name}.out')
        self.daemons[name] = self.hosts.popen(host, command, self.logs[name], {**self.env, **(env or {})})

    def _start_minio(self) -> None:
        self.launch_on('storage', 'minio', [str(self.minio), 'server', '/tmp/minio/data', '--quiet',
                                            '--address', f':{MINIO_PORT}', '--console-address', ':9001'],
                       {'MINIO_ROOT_USER': objectstores.MINIO_USER, 'MINIO_ROOT_PASSWORD': objectstores.MINIO_PASSWORD,
                        'MINIO_BROWSER': 'off'})
        url = f'http://{self.hosts["storage"].address}:{MINIO_PORT}/minio/health/ready'
        processes.wait_until(lambda: self.call('launcher', objectstores.http_ready, url), self.daemons, self.logs, 60,
                             'MinIO answering')

    def make_bucket(self, name: str) -> None:
        """Makes bucket `name` on MinIO (from the launcher host)."""
        self.call('launcher', _make_bucket, f'http://{self.hosts["storage"].address}:{MINIO_PORT}', name)

    def stop(self) -> None:
        super().stop()
        self.hosts.stop()


class FlinkHosts(ClusterOnHosts, flink.FlinkCluster):
    """MinIO and a Flink session cluster on simulated hosts; a context manager that removes all of it.

    Args:
      directory: Where the hosts' disks go.
      settings: The cluster's size and restarts (`settings.taskmanagers` hosts of TaskManagers).
      owner: As `hosts.Hosts`'s (None for a cluster that outlives its command).
      env: More environment for the daemons and their SDK workers (OMP_NUM_THREADS, ...).

    Raises:
      hosts.HostsUnavailable: Where this machine cannot make namespaces.
      engines.fetch.EngineMissing: Without Java, Flink, Beam's job server or MinIO.
    """

    log_dir = LOG

    def __init__(self, directory: Path, settings: flink.FlinkSettings = flink.FlinkSettings(),
                 owner: Optional[int] = -1, env: Optional[dict] = None):
        why = hosts.available()
        if why:
            raise hosts.HostsUnavailable(why)
        self.minio = objectstores.binary(objectstores.MINIO)
        super().__init__(Path(directory), settings, {**STORE_ENV, **(env or {})})
        self.rest_port = REST_PORT
        self.hosts = hosts.Hosts(self.directory, host_names(settings.taskmanagers), owner)

    @property
    def master(self) -> str:
        return f'jobmanager:{REST_PORT}'

    @property
    def rest(self) -> str:
        """The REST API's URL from a thread in a host's namespace (`call`): host names resolve only inside hosts."""
        return f'http://{self.hosts["jobmanager"].address}:{REST_PORT}'

    @property
    def job_endpoint(self) -> str:
        return f'jobserver:{JOB_PORT}'

    def portable_flags(self) -> list[str]:
        """The flags that send a build to the shared job server on `jobserver`, naming Flink's REST API too (so
        the build looks at its job there, and cancels it there)."""
        return ['--runner', 'PortableRunner', '--job_endpoint', self.job_endpoint, '--flink_master', self.master,
                '--parallelism', str(self.settings.parallelism)]

    def start(self, timeout: float = 180) -> 'FlinkHosts':
        """Makes the hosts, starts MinIO, the JobManager, the TaskManagers and the job server; returns once ready."""
        self.hosts.start()
        self._start_minio()
        config = self.config()
        for name in self.hosts.hosts:
            conf = self.hosts[name].outside(CONF)
            conf.mkdir(parents=True, exist_ok=True)
            (conf / 'config.yaml').write_text(yaml.safe_dump(config, sort_keys=True))
            (conf / 'log4j.properties').write_text(flink.LOG4J)
        self._start_jobmanager()
        for i in range(self.settings.taskmanagers):
            self.start_taskmanager(i)
        self._start_job_server()
        self.wait_for_taskmanagers(self.settings.taskmanagers, timeout)
        self._wait_for_job_server(timeout)
        return self

    def config(self) -> dict:
        """FlinkCluster's configuration, addressed by host name on every interface, with Flink's usual ports."""
        return {**super().config(),
                'jobmanager.rpc.address': 'jobmanager', 'jobmanager.bind-host': '0.0.0.0',
                'jobmanager.rpc.port': RPC_PORT, 'blob.server.port': str(BLOB_PORT),
                'rest.address': 'jobmanager', 'rest.bind-address': '0.0.0.0', 'rest.port': REST_PORT,
                'taskmanager.bind-host': '0.0.0.0', 'taskmanager.data.port': DATA_PORT,
                'io.tmp.dirs': '/tmp/flink/tmp', 'web.tmpdir': '/tmp/flink/tmp'}

    def resource_params(self, command: str, conf: Optional[Path] = None) -> tuple[list[str], list[str]]:
        """Computed here, from the JobManager host's copy of the configuration."""
        return super().resource_params(command, conf or self.hosts['jobmanager'].outside(CONF))

    def start_taskmanager(self, i: int) -> None:
        """Starts TaskManager `i` on its host, named by its host (`taskmanager.host`)."""
        if self._taskmanager_jvm is None:
            self._taskmanager_jvm = self.resource_params('GET_TM_RESOURCE_PARAMS')
        jvm, dynamic = self._taskmanager_jvm
        name = f'taskmanager-{i}'
        self._daemon(name, jvm, flink.TASKMANAGER,
                     dynamic + ['-D', f'taskmanager.resource-id=tm-{i}', '-D', f'taskmanager.host={name}'])

    def daemon_of(self, host: str) -> str:
        return DAEMONS.get(host, host)

    def mend(self, host: str, timeout: float = 180) -> None:
        """`host` is back, its daemon started again: MinIO with the data its disk kept, the job server, a
        TaskManager; a JobManager, with every TaskManager registered again (one that gave up waiting for it is
        started again)."""
        self.hosts.mend(host)
        if host == 'storage':
            self._start_minio()
        elif host == 'jobserver':
            self._start_job_server()
            self._wait_for_job_server(timeout)
        elif host == 'jobmanager':
            self._start_jobmanager()
            for i in range(self.settings.taskmanagers):
                if self.daemons[f'taskmanager-{i}'].poll() is not None:
                    self.start_taskmanager(i)
            self.wait_for_taskmanagers(self.settings.taskmanagers, timeout)
        else:
            self.start_taskmanager(int(host.rsplit('-', 1)[1]))

    def wait_for_taskmanagers(self, n: int, timeout: float = 120) -> None:
        processes.wait_until(lambda: self.call('launcher', _taskmanagers, self.rest) == n, self.daemons, self.logs,
                             timeout, f'{n} TaskManagers registered')

    def _daemon(self, name: str, jvm: list[str], main: str, dynamic: list[str]) -> None:
        classpath = ':'.join([f'{self.dist / "lib"}/*', *self.beam_jars(skip=('flink-', 'slf4j-'))])
        self.launch_on(name, name, [self.java, *jvm, f'-Dlog.file={LOG}/{name}.log',
                                    f'-Dlog4j.configurationFile=file:{CONF}/log4j.properties',
                                    '-cp', classpath, main, '--configDir', CONF, *dynamic])
        self.logs[name] = self.hosts[name].outside(f'{LOG}/{name}.log')

    def _start_jobmanager(self) -> None:
        jvm, dynamic = self.resource_params('GET_JM_RESOURCE_PARAMS')
        self._daemon('jobmanager', jvm, flink.JOBMANAGER, dynamic)

    def _wait_for_job_server(self, timeout: float) -> None:
        processes.wait_until(lambda: self.call('launcher', listening, self.hosts['jobserver'].address, JOB_PORT),
                             self.daemons, self.logs, timeout, 'job server listening')

    def _start_job_server(self) -> None:
        self.launch_on('jobserver', 'jobserver', [
            # --job-host names the host: the job server gives it as its artifact service's address, which the
            # launcher dials (0.0.0.0 there sends it to its own host).
            self.java, '-jar', str(self.job_server), '--flink-master', self.master, '--job-host', 'jobserver',
            '--job-port', str(JOB_PORT), '--artifact-port', str(ARTIFACT_PORT),
            '--expansion-port', str(EXPANSION_PORT)])


SAMPLE_CORPUS = 's3://ragsieve/sample_corpus'
# Beside state.FLAGS_FILE (FlinkRunner's flags), the flags of a build sent to the job server on `jobserver`.
PORTABLE_FLAGS_FILE = 'portable_flags'
# Uploads a local directory to an s3:// prefix, run on the launcher host with the store's settings.
_UPLOAD = ('import pathlib, sys; from transforms import storage; local, url = pathlib.Path(sys.argv[1]), sys.argv[2]\n'
           'for p in sorted(f for f in local.rglob("*") if f.is_file()):\n'
           '    storage.write_bytes(f"{url}/{p.relative_to(local).as_posix()}", p.read_bytes())')


def start_detached(directory: Path, taskmanagers: int = 2) -> FlinkHosts:
    """Starts the hosts and the cluster for `python -m engines hosts start`: they outlive this process
    (`attached(directory).stop()` removes them). MinIO gets the bucket `ragsieve` and the sample corpus
    (`SAMPLE_CORPUS`); a directory used before keeps MinIO's data (the bucket, earlier builds' outputs).

    Raises:
      ValueError: While hosts started under `directory` are still up (their names are the directory's).
    """
    cluster = FlinkHosts(directory, flink.FlinkSettings(taskmanagers=taskmanagers), owner=None)
    if cluster.hosts.switch in hosts.namespaces():
        raise ValueError(f'hosts are already up under {directory}: use them, or remove them first with '
                         f'python -m engines hosts stop --dir {directory}')
    try:
        cluster.start()
        cluster.make_bucket('ragsieve')
        done = cluster.hosts.run('launcher', [sys.executable, '-c', _UPLOAD, str(CHECKOUT / 'sample_corpus'),
                                              SAMPLE_CORPUS], env=cluster.store_env, cwd=str(CHECKOUT))
        if done.returncode:
            raise processes.EngineFailed(f'uploading the sample corpus failed: {done.stderr.strip()[-500:]}')
    except BaseException:
        cluster.stop()
        raise
    return cluster


def attached(directory: Path) -> hosts.Hosts:
    """The hosts `start_detached` made under `directory`, to run commands on or remove.

    Raises:
      ValueError: When none were made there.
    """
    try:
        recorded = json.loads((Path(directory) / hosts.STATE_FILE).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f'--dir {directory}: no hosts recorded there ({e})') from None
    return hosts.Hosts(directory, list(recorded['hosts']), owner=None)


def run_detached(directory: Path, host: str, argv: Sequence[str]) -> int:
    """Runs `argv` on `host` of the hosts under `directory` (in the checkout, with the store's settings)."""
    made = attached(directory)
    if host not in made.hosts:
        raise ValueError(f'no host {host!r}: the hosts are {", ".join(made.hosts)}')
    return subprocess.run(made.command(host, argv, cwd=str(CHECKOUT)), env=made.environment(STORE_ENV)).returncode


def listening(address: str, port: int) -> bool:
    """Whether anything accepts a TCP connection at `address:port` (from the calling thread's namespace)."""
    try:
        socket.create_connection((address, port), timeout=2).close()
        return True
    except OSError:
        return False


def _make_bucket(endpoint: str, name: str) -> None:
    """Makes bucket `name`; one MinIO kept from an earlier start on the same directory is used as it is."""
    import boto3

    client = boto3.client('s3', endpoint_url=endpoint, aws_access_key_id=objectstores.MINIO_USER,
                          aws_secret_access_key=objectstores.MINIO_PASSWORD, region_name='us-east-1')
    try:
        client.create_bucket(Bucket=name)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass


def _taskmanagers(rest: str) -> int:
    overview = processes.read_json(f'{rest}/overview')
    return overview.get('taskmanagers', 0) if overview else 0
