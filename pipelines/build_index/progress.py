"""A build's progress: the workers' live counts (`Listener`), the build's meters, what each runner can show.

The stages count through `transforms.progress`, which sends each worker
process's cumulative counts to the address in its environment; `Listener`
binds that address on the launcher and sums the latest counts of each
process. In-process and multi_processing workers inherit the launcher's
environment (`reporting`); an engine's PROCESS workers get the address in
their environment config (`runners.with_worker_env`). The address is where
the workers run (`progress_address`): `--progress_address`, or this
machine's address on its route to the engine's workers (Flink's
TaskManagers, else the master). DOCKER and Dataflow workers get no address:
the view then names the engine's own UI (`engine_notes`).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import errno
import hmac
import ipaddress
import json
import os
import secrets
import socket
import threading
import time
from typing import Callable, Iterator, Optional, Sequence
from urllib.parse import urlsplit

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions

from pipelines.build_index import engine_job, flink_rest_api, runners
from pipelines.common.progress import View
from pipelines.common.progress_meters import Meter
from transforms import progress as counts
from transforms.dedup.stage_parts import counter_namespace
from transforms.dedup.stages import feature_plan
from transforms.features.compute import EMBEDDING
from transforms.output.writers import OUTPUT_TABLES

# Engine hosts whose workers reach a listener on this machine's loopback (`[local]`: an embedded engine).
LOCAL_HOSTS = ('localhost', '127.0.0.1', '::1', '[local]')


# A sender's sequence grows by one a datagram: a jump beyond this is no datagram of its own.
MAX_SEQUENCE_STEP = 1_000_000
# Senders (a stage instance each: `transforms.progress.Tally`) a listener keeps counts of: more than any job's
# on one machine (a local Flink build of 1M chunks runs 78 partitions of each counting stage).
MAX_SENDERS = 16384


class Listener:
    """A UDP socket that keeps, per sender (a stage instance of a worker), its latest counts; a context manager.

    Only datagrams that carry this job's `token` count (`parse_message`):
    any other process that reaches the port can send to it, and what it
    sends is ignored, never shown and never able to fail the build.

    After an engine restarted the whole job (`restarted`), the counts are
    the current attempt's: a sender first heard after the latest restart
    belongs to it, one heard before to an attempt that failed (its stage
    instances are gone, even in an SDK worker that serves the next attempt:
    `Tally`). Each count is the sum over the latest attempt that has sent
    it, so it never adds two attempts' work.

    Args:
      host: The address the workers send to: one of this machine's, bound
        as it is; any other (a NAT's, a container's published port) is
        bound on every interface, at the same port.
      port: The port; 0: any free one.
      token: The job's secret; default: a new random one.

    Raises:
      OSError: When neither can be bound.
    """

    def __init__(self, host: str = '127.0.0.1', port: int = 0, token: Optional[str] = None):
        # A random secret, not an id: it keeps other processes' datagrams out, and nothing depends on its value.
        self.token = token or secrets.token_hex(16)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            try:
                self._socket.bind((host, port))
            except OSError as e:
                if e.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, socket.EAI_NONAME):
                    raise
                self._socket.bind(('0.0.0.0', port))  # not this machine's: forwarded to it
        except BaseException:
            self._socket.close()
            raise
        self._socket.settimeout(0.2)
        self.bound = '{}:{}'.format(*self._socket.getsockname())
        self.address = f'{host}:{self._socket.getsockname()[1]}'
        self._latest: dict[str, tuple[int, dict]] = {}
        self._first_heard: dict[str, float] = {}
        self._restarts: list[float] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._receive, name='ragsieve-progress-listener', daemon=True)
        self._thread.start()

    def __enter__(self) -> 'Listener':
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def counts(self) -> collections.Counter:
        """Each count summed over the senders of the latest attempt that sent it (`attempt_counts`)."""
        with self._lock:
            return attempt_counts([(self._first_heard[s], latest) for s, (_, latest) in self._latest.items()],
                                  self._restarts)

    def restarted(self, times: Sequence[float]) -> None:
        """Takes the times (seconds since the epoch) at which the engine restarted the whole job."""
        with self._lock:
            self._restarts = sorted(set(self._restarts).union(times))

    @property
    def senders(self) -> int:
        """How many processes have sent counts."""
        with self._lock:
            return len(self._latest)

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        self._socket.close()

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                data = self._socket.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                if self._closed.wait(0.05):
                    return
                continue  # a transient error of the socket: the listener lives as long as the job
            try:
                self.take(data)
            except Exception:  # noqa: BLE001 - no datagram may stop the listener
                continue

    def take(self, data: bytes) -> bool:
        """Keeps the counts of one datagram if it is a message of this job's workers; returns whether it was."""
        message = parse_message(data, self.token)
        if message is None:
            return False
        sender, sequence, latest = message
        with self._lock:
            last = self._latest.get(sender, (0, None))[0]
            if sender not in self._latest and len(self._latest) >= MAX_SENDERS:
                return False
            # An older datagram, overtaken by a later one; or a jump no sender makes.
            if not last < sequence <= last + MAX_SEQUENCE_STEP:
                return False
            self._latest[sender] = (sequence, latest)
            self._first_heard.setdefault(sender, time.time())
        return True


def attempt_counts(heard: Sequence[tuple[float, dict]], restarts: Sequence[float]) -> collections.Counter:
    """Each count summed over the senders of the latest attempt that sent it.

    Args:
      heard: `(first heard, latest counts)` of each sender, in seconds since the epoch.
      restarts: When the engine restarted the whole job, sorted: a sender
        first heard after the k-th belongs to attempt k.
    """
    by_attempt: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for first, latest in heard:
        by_attempt[bisect.bisect_right(restarts, first)].update(latest)
    latest: dict = {}
    for attempt in sorted(by_attempt):
        latest.update(by_attempt[attempt])  # a later attempt's count replaces an earlier one's
    return collections.Counter(latest)


def parse_message(data: bytes, token: str) -> Optional[tuple[str, int, dict]]:
    """`(sender, sequence, counts)` of a datagram `transforms.progress` sent with `token`; None for anything else.

    Anything that does not parse, or parses to other types, sizes or
    values than the workers send (a bool, a negative or huge count, JSON
    nested too deep to read), is not a message.
    """
    if not isinstance(data, bytes) or len(data) > 65536:
        return None
    try:
        message = json.loads(data.decode('utf-8'))
    except Exception:  # noqa: BLE001 - RecursionError, ValueError, MemoryError...: not a message
        return None
    if not isinstance(message, dict) or not isinstance(message.get('token'), str):
        return None
    if not hmac.compare_digest(message['token'].encode('utf-8', 'replace'), token.encode('utf-8')):
        return None
    sender, sequence, latest = message.get('sender'), message.get('sequence'), message.get('counts')
    if not (isinstance(sender, str) and 0 < len(sender) <= counts.MAX_NAME and type(sequence) is int
            and 0 < sequence < 2 ** 63 and isinstance(latest, dict) and len(latest) <= counts.MAX_KEYS):
        return None
    if not all(isinstance(k, str) and len(k) <= counts.MAX_NAME and type(v) is int and 0 <= v < counts.MAX_COUNT
               for k, v in latest.items()):
        return None
    return sender, sequence, latest


@contextlib.contextmanager
def reporting(address: str, token: str = '') -> Iterator[None]:
    """Sets the workers' `transforms.progress.ENV` and `TOKEN_ENV` in this process's environment, for the block."""
    values = {counts.ENV: address, counts.TOKEN_ENV: token}
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def live_counts(options: PipelineOptions, view: View,
                meters: Sequence[Meter]) -> Iterator[Optional[engine_job.LiveCounts]]:
    """Shows `meters` while the block runs the job, over the workers' counts where they can be sent.

    Says first where the engine shows the job (`engine_notes`). Where the
    workers can be given an address (`workers_get_address`), a `Listener`
    at `progress_address` gathers their counts: its address is in this
    process's environment and in that of the engine's PROCESS workers for
    the block. Yields the counts as the stall bound sees them
    (`engine_job.wait`), or None without a listener.
    """
    given = workers_get_address(options)
    for note in engine_notes(options, given):
        view.note(note)
    listener = None
    if view.enabled and given:
        host, port = progress_address(options)
        try:
            listener = Listener(host, port)
        except OSError as e:  # nothing to bind: the counts come when the job ends, the build goes on
            view.note(f'no live counts: cannot listen on {host}:{port} ({e.strerror or e})')
    if listener is None:
        view.show(meters)
        yield None
        return
    if engine_job.engine(options):
        view.note(f'live counts: the workers send them to {listener.address} (--progress_address)'
                  + (f', heard on {listener.bound}' if listener.bound.split(':')[0] != host else ''))
    with listener, reporting(listener.address, listener.token):
        runners.with_worker_env(options, {counts.ENV: listener.address, counts.TOKEN_ENV: listener.token})
        view.show(meters, [listener.counts])
        yield engine_job.LiveCounts(view.counts, lambda: listener.senders > 0, workers_on_this_machine(options),
                                    restarted=listener.restarted, where=view.where)


def add_flags(parser) -> None:
    """Adds `--progress_address` to an argparse parser (or a Beam options parser)."""
    parser.add_argument('--progress_address', type=address, default=None,
                        help="HOST[:PORT] the engine's workers send their live counts to (UDP), which the "
                             'launcher listens on (on every interface at PORT when HOST is not its own: a NAT, '
                             "a container's published port); default: this machine's address on its route to "
                             "the workers (Flink's TaskManagers, else the master), any free port.")


def address(value: str) -> str:
    """`--progress_address`'s type: `value` if it is a `HOST[:PORT]` (`parse_progress_address`).

    Raises:
      ValueError: For anything else.
    """
    parse_progress_address(value)
    return value


def parse_progress_address(value: str) -> tuple[str, int]:
    """`HOST[:PORT]` -> `(host, port)`; port 0 (any free one) when none is given.

    Raises:
      ValueError: Naming `--progress_address`, for anything else.
    """
    host, colon, port = value.rpartition(':')
    if not colon:
        host, port = value, '0'
    if not host or ':' in host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f'--progress_address {value!r}: expected HOST or HOST:PORT (an IPv4 address or a name, '
                         'a port below 65536)')
    return host, int(port)


def route_address(host: str) -> str:
    """This machine's address on its route to `host`: the source of a UDP socket connected there (nothing is sent).

    Raises:
      OSError: For a host that does not resolve, or that no route leads to.
    """
    family, kind, proto, _, target = socket.getaddrinfo(host, 9, socket.AF_INET, socket.SOCK_DGRAM)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.connect(target)
        return probe.getsockname()[0]


def choose_address(hosts: Sequence[str], route: Optional[Callable[[str], str]] = None) -> str:
    """The address workers on `hosts` send their counts to: this machine's on its route to them.

    The first address that is not a loopback one, where a host is another
    machine (a worker on this machine reaches it too); 127.0.0.1 only when
    every host is this machine, or none resolves or has a route.

    Args:
      hosts: Where the workers run (names or addresses).
      route: This machine's address towards a host; default: `route_address`.
    """
    for host in hosts:
        try:
            address = (route or route_address)(host)
        except OSError:
            continue
        if not ipaddress.ip_address(address).is_loopback:
            return address
    return '127.0.0.1'


def progress_address(options: PipelineOptions) -> tuple[str, int]:
    """`(host, port)` the workers send their counts to: `--progress_address`, else where they run.

    The workers of the DirectRunner, LOOPBACK ones and those of an embedded
    engine run in this process or beside it: the loopback. An engine's are
    on its TaskManagers (Flink, asked through its REST API) or, where the
    engine does not say, on the master's side: this machine's address on its
    route there (`choose_address`), whatever the master is called
    (`--flink_master localhost:8081` on the JobManager's host included).

    Raises:
      ValueError: For a `--progress_address` that is no `HOST[:PORT]`.
    """
    given = options.get_all_options().get('progress_address')
    if given:
        return parse_progress_address(given)
    host = engine_host(options)
    if not engine_job.engine(options) or host == '[local]' or environment_type(options) == 'LOOPBACK':
        return '127.0.0.1', 0
    rest = engine_job.flink_rest(options)
    hosts = (flink_rest_api.taskmanager_hosts(rest) if rest else []) or ([host] if host else [])
    return choose_address(hosts), 0


def build_meters(config, files: int) -> list[Meter]:
    """The build's meters: files read, chunks made, chunks embedded, the filters' tallies, parts written.

    The embedding total is the chunks made less those dropped by the filters
    that run before the first that needs embeddings (`feature_plan`): exact
    once those filters are done, an upper bound until then.

    Args:
      config: The build's `BuildConfig`.
      files: The files the input lists.
    """
    specs = config.filters.specs
    namespaces = [counter_namespace(i, s.name) for i, s in enumerate(specs)]
    plan = feature_plan(config.filters)
    before_embedding = next(i for i, needs in enumerate(plan) if EMBEDDING in needs)

    def dropped(c, upto=len(specs)):
        return sum(c.get(counts.filter_key(ns, counts.DROPPED), 0) for ns in namespaces[:upto])

    def embed_total(c):
        return max(c.get(counts.EMBEDDED, 0), c.get(counts.CHUNKS, 0) - dropped(c, before_embedding))

    def filter_note(c):
        each = ', '.join(f'{s.name} {c.get(counts.filter_key(ns, counts.DROPPED), 0):,}'
                         for s, ns in zip(specs, namespaces))
        kept = c.get(counts.filter_key(namespaces[-1], counts.KEPT), 0)
        return f'kept {kept:,}, dropped {dropped(c):,} ({each})'

    meters = [
        Meter('read', counts.FILES, 'files', total=files,
              note=lambda c: f'{c.get(counts.DOCUMENTS, 0):,} documents'),
        Meter('chunk', counts.CHUNKS, 'chunks'),
        Meter('embed', counts.EMBEDDED, 'chunks', total=embed_total, rate=True),
    ]
    if specs:
        meters.append(Meter('filter', note=filter_note))
    meters.append(Meter('write', counts.PARTS, 'parts', total=len(OUTPUT_TABLES) * config.num_shards))
    return meters


def environment_type(options: PipelineOptions) -> str:
    """The SDK workers' environment, upper case: LOOPBACK for an embedded engine without one; '' for none."""
    environment = options.get_all_options().get('environment_type')
    return (environment or ('LOOPBACK' if engine_host(options) == '[local]' else '')).upper()


def workers_get_address(options: PipelineOptions) -> bool:
    """Whether the runner's workers can be given the address to send counts to.

    True for the DirectRunner (in process or multi_processing), for SDK
    workers that run in this process (LOOPBACK, the default of an embedded
    Flink), and for an engine's PROCESS workers (`runners.with_worker_env`);
    not for DOCKER or EXTERNAL ones, nor Dataflow's.
    """
    runner = runners.short_name(options.view_as(StandardOptions).runner or 'direct')
    if runner in runners.DIRECT_NAMES:
        return True
    if runner == 'dataflow':
        return False
    return environment_type(options) in ('LOOPBACK', 'PROCESS')


def workers_on_this_machine(options: PipelineOptions) -> bool:
    """Whether the workers run on this machine, as far as the flags tell: the DirectRunner, LOOPBACK, an engine
    on the loopback (whose workers may still be elsewhere: a JobManager's host; `engine_job.wait` asks Flink)."""
    runner = runners.short_name(options.view_as(StandardOptions).runner or 'direct')
    if runner in runners.DIRECT_NAMES:
        return True
    environment = environment_type(options)
    return environment == 'LOOPBACK' or (environment == 'PROCESS' and engine_host(options) in LOCAL_HOSTS)


def engine_host(options: PipelineOptions) -> Optional[str]:
    """The host of `--flink_master`, `--spark_master_url` or `--job_endpoint`; `[local]` for an embedded one."""
    values = options.get_all_options()
    flag = {'flink': 'flink_master', 'spark': 'spark_master_url'}.get(
        runners.short_name(options.view_as(StandardOptions).runner or 'direct'), 'job_endpoint')
    master = values.get(flag) or ''
    if master.startswith(('[', 'local[')) or master in ('local', 'embed'):
        return '[local]'
    return urlsplit(master if '://' in master else f'//{master}').hostname


def engine_notes(options: PipelineOptions, given: bool) -> list[str]:
    """What the view says before the job runs: the engine's web UI, whether live counts come, what bounds a stall."""
    values = options.get_all_options()
    runner = runners.short_name(options.view_as(StandardOptions).runner or 'direct')
    notes = []
    local = engine_host(options) == '[local]'
    if runner == 'flink' and not local:
        master = values['flink_master']
        notes.append(f'Flink web UI: {master if "://" in master else "http://" + master}')
    elif runner == 'spark' and not local:
        notes.append(f'Spark master {values["spark_master_url"]}: its web UI (port 8080 by default) '
                     'lists the job and its stages')
    elif runner == 'portable':
        notes.append(f'job service {values.get("job_endpoint")}')
    if not given:
        notes.append(f'the {runner} workers cannot reach this launcher: no live counts until the job ends')
    bound = engine_job.stall_note(options, given and workers_on_this_machine(options))
    if bound:
        notes.append(bound)
    return notes


def dataflow_console(options: PipelineOptions, result) -> Optional[str]:
    """The Dataflow console page of a job submitted, as Beam names it; None for other runners."""
    job_id = getattr(result, 'job_id', None)
    if runners.short_name(options.view_as(StandardOptions).runner or 'direct') != 'dataflow' or job_id is None:
        return None
    cloud = options.view_as(GoogleCloudOptions)
    return (f'Dataflow console: https://console.cloud.google.com/dataflow/jobs/{cloud.region}/{job_id()}'
            f'?project={cloud.project}')
