"""Settings that work only where the launcher runs, refused before the job when the workers run on other hosts.

An engine's SDK workers (Flink's TaskManagers, Spark's executors, the
cluster behind a job server) read the input and write the run where they
run: a path on the launcher's own disk is not there (a local --output ran
the whole job, then found no part files; a local --input failed after
the job), and a loopback store endpoint is their own host's. `check`
refuses both in one line naming the flag, before anything loads, once it
knows where the workers are (`remote_workers`): Flink's TaskManagers as
its REST API lists them, else the master's host. The same for a
PortableRunner build whose `--flink_master` is a loopback address while
its job server runs elsewhere: the job server submits there, to its own
loopback.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
from typing import Callable, Optional, Sequence
from urllib.parse import urlsplit

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.build_index import engine_job, flink_rest_api
from transforms import storage

# Filesystems every host of a cluster can mount: a local path on one of them is shared storage, and accepted.
# The launcher cannot see whether the workers mount it too; refusing a shared mount would block a working
# cluster, while one the workers lack still ends in the engine's error naming the path.
NETWORK_FILESYSTEMS = frozenset({'nfs', 'nfs4', 'cifs', 'smb3', 'smbfs', 'ceph', 'glusterfs', '9p', 'lustre',
                                 'gpfs', 'beegfs', 'afs', 'ocfs2', 'gfs2', 'orangefs', 'pvfs2'})
# FUSE filesystems are network ones as a rule (sshfs, s3fs, gcsfuse, JuiceFS): accepted alike.
FUSE_PREFIX = 'fuse.'
MOUNTINFO = '/proc/self/mountinfo'
# Names of the loopback (RFC 6761: `localhost` and any name under it).
LOOPBACK_NAMES = ('localhost', 'localhost.localdomain', 'ip6-localhost', 'ip6-loopback')


@dataclasses.dataclass(frozen=True)
class Workers:
    """Where a build's workers run, when that is not this machine.

    Attributes:
      runner: The `--runner` (`FlinkRunner`, ...).
      hosts: The hosts that are not this machine.
      source: How they were learned (`Flink's REST API`, `--job_endpoint`, ...).
    """

    runner: str
    hosts: tuple[str, ...]
    source: str

    def __str__(self) -> str:
        return f'the {self.runner} workers run on other hosts ({", ".join(self.hosts)}: {self.source})'


def check(options: PipelineOptions, paths: dict) -> None:
    """Refuses, before the job, the settings that the build's workers on other hosts could not use.

    Args:
      options: The build's pipeline options.
      paths: `{flag: path}` of the paths the workers read or write (None: not given).

    Raises:
      ValueError: One line naming the flag and its value.
    """
    check_job_server_reaches_flink(options, is_this_machine)
    workers = remote_workers(options, flink_rest_api.taskmanager_hosts, is_this_machine)
    if workers is None:
        return
    check_store_endpoint(options.get_all_options().get('s3_endpoint_url'), workers)
    check_paths_shared(paths, workers, filesystem_of)


def remote_workers(options: PipelineOptions, taskmanagers: Callable[[str], Sequence[str]],
                   here: Callable[[str], bool]) -> Optional[Workers]:
    """Where the workers of an engine's build run, when some are not on this machine; None otherwise.

    None for the DirectRunner, an embedded engine, LOOPBACK workers (they run
    in the launcher) and workers all on this machine. Flink's workers are
    its TaskManagers (`--flink_master`, also of a PortableRunner build);
    where nothing can be learned, the master's host (`--spark_master_url`,
    `--job_endpoint`) stands for them.

    Args:
      options: The build's pipeline options.
      taskmanagers: The TaskManagers' hosts from Flink's REST API ([] when it does not answer).
      here: Whether a host is this machine.
    """
    master = engine_job.master_address(options)
    environment = (options.get_all_options().get('environment_type') or '').upper()
    if engine_job.engine(options) is None or master is None or environment == 'LOOPBACK':
        return None
    rest = engine_job.flink_rest(options)
    hosts, source = (list(taskmanagers(rest)) if rest else []), "Flink's TaskManagers"
    if not hosts:
        flink = engine_job.flink_master(options)
        flag, host, _ = flink or master
        hosts, source = [host], f'the host of {flag}'
    elsewhere = tuple(h for h in hosts if not here(h))
    if not elsewhere:
        return None
    return Workers(options.view_as(StandardOptions).runner, elsewhere, source)


def check_paths_shared(paths: dict, workers: Workers, filesystem: Callable[[str], Optional[str]]) -> None:
    """Refuses a path on this machine's own disk for workers on other hosts.

    Args:
      paths: `{flag: path}` (None: not given).
      workers: Where the workers run.
      filesystem: The type of the filesystem a local path lies on (None: unknown).

    Raises:
      ValueError: Naming the first such flag and path.
    """
    for flag, path in paths.items():
        if not path or storage.is_remote(path):
            continue
        kind = filesystem(path)
        if is_shared_filesystem(kind):
            continue
        disk = f' ({kind})' if kind else ''
        raise ValueError(f'{flag} {path}: a path on this machine\'s own disk{disk}, but {workers}: it must be on '
                         'storage every worker reaches (s3://, gs://, or a shared mount)')


def check_store_endpoint(endpoint: Optional[str], workers: Workers) -> None:
    """Refuses a loopback `--s3_endpoint_url`: each worker would look for the store on its own host.

    The launcher's `AWS_ENDPOINT_URL(_S3)` is not checked: ragsieve does not
    hand its environment to the workers, which read their own (the
    TaskManager's, the executor's).

    Raises:
      ValueError: Naming the flag.
    """
    host = urlsplit(endpoint if '://' in (endpoint or '') else f'//{endpoint}').hostname if endpoint else None
    if host and is_loopback(host):
        raise ValueError(f'--s3_endpoint_url {endpoint}: a loopback address, which reaches the store from this '
                         f'machine only, but {workers}: give the store\'s name or address as the workers reach it')


def check_job_server_reaches_flink(options: PipelineOptions, here: Callable[[str], bool]) -> None:
    """Refuses a loopback `--flink_master` for a job server on another host: it submits there, to its own loopback.

    Raises:
      ValueError: Naming `--flink_master` and the job server.
    """
    if engine_job.engine(options) != 'portable':
        return
    flink, server = engine_job.flink_master(options), engine_job.master_address(options)
    if flink is None or server is None or not is_loopback(flink[1]) or here(server[1]):
        return
    raise ValueError(f'--flink_master {flink[1]}:{flink[2]}: a loopback address, but the job server at '
                     f'{server[1]}:{server[2]} (--job_endpoint) runs on another host and submits the job to Flink '
                     'there, on its own loopback: give the JobManager\'s address as the job server\'s host reaches it')


def is_loopback(host: str) -> bool:
    """Whether `host` names the loopback: `localhost` (and names under it), 127.0.0.0/8, ::1."""
    name = host.strip('[]').lower().rstrip('.')
    if name in LOOPBACK_NAMES or name.endswith('.localhost'):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_this_machine(host: str) -> bool:
    """Whether every address `host` resolves to is this machine's (a loopback one, or one it can bind).

    A host that does not resolve here is taken for another machine.
    """
    try:
        found = socket.getaddrinfo(host.strip('[]'), None, proto=socket.IPPROTO_UDP)
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(_is_own(family, address) for family, _, _, _, address in found)


def _is_own(family: int, address: tuple) -> bool:
    if ipaddress.ip_address(address[0].split('%')[0]).is_loopback:
        return True
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((address[0], 0, *address[2:]))  # only an address of this machine's interfaces binds
    except OSError:
        return False
    return True


def is_shared_filesystem(kind: Optional[str]) -> bool:
    """Whether a filesystem of type `kind` (mountinfo's) is one every host can mount (`NETWORK_FILESYSTEMS`)."""
    return bool(kind) and (kind in NETWORK_FILESYSTEMS or kind.startswith(FUSE_PREFIX))


def filesystem_of(path: str) -> Optional[str]:
    """The type of the filesystem `path` lies on (`ext4`, `nfs4`, ...); None where /proc does not say (not Linux).

    The path need not exist yet: its longest mounted prefix decides.
    """
    try:
        with open(MOUNTINFO, encoding='utf-8', errors='replace') as f:
            mountinfo = f.read()
    except OSError:
        return None
    return mount_type(os.path.realpath(path), mountinfo)


def mount_type(path: str, mountinfo: str) -> Optional[str]:
    """The filesystem type of the mount `path` (absolute, links resolved) lies on, from /proc's mountinfo text.

    The longest mount point that holds `path` wins; of two at one point the
    later line, mounted over the other.
    """
    best, kind = None, None
    for line in mountinfo.splitlines():
        left, separator, right = line.partition(' - ')
        fields, tail = left.split(), right.split()
        if not separator or len(fields) < 5 or not tail:
            continue
        point = _unescape(fields[4])
        holds = path == point or path.startswith(point.rstrip('/') + '/')
        if holds and (best is None or len(point) >= len(best)):
            best, kind = point, tail[0]
    return kind


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (`\\040` for a space) undone."""
    return re.sub(r'\\([0-7]{3})', lambda m: chr(int(m.group(1), 8)), field)
