"""Waiting for a build's job on an engine (Flink, Spark, a job service): a bound on a job without progress, its cancellation.

Beam's portable runner waits for a job as long as its job service answers:
a Spark job whose only worker died waits for resources forever, and a job
whose launcher stopped waiting (a job server killed, Ctrl-C) runs on in the
cluster and writes into a run directory the build has given up. So a build
on an engine waits through `wait`: a job that shows no progress for
`--engine_stall_timeout` seconds is cancelled and ends the build with one
line and exit status 6 (`JOB_FAILED`), a lost job server too (its stream
broken, or a job server elsewhere that accepts no connection for
`SILENT_SERVICE_SECONDS`: a host cut off breaks no stream), a JobManager
silent as long, and a lost
lease on the output (its store gone); Ctrl-C cancels the job before the
build exits 130. Each such line, and a failed job's, leads with the first
of the job's services that no longer answers, when one does not
(`engine_services`). Progress is the workers' live
counts (`pipelines/build_index/progress.py`) once they are known to reach
the launcher (a count arrived, or the workers run on this machine);
until then, and beside them, the engine's own view of the job: Flink's REST
API (`flink_rest_api.look`), the REST API of a SparkRunner driver's web UI
(`spark_rest_api.look`): a job whose tasks run, or whose vertices, tasks or
record counts move, makes progress. Where neither can be seen (a Spark job
server elsewhere before any count arrived, `--progress none` off Flink and
SparkRunner) nothing bounds the job but the engine, and the view says so
(`stall_note`). The job
is cancelled through its job service, and a Flink job also through Flink's
REST API by its name (`job_name`), which still answers when the job server
is gone (a job server only stops its own part: the Flink job runs on). The
same for `--runner PortableRunner --job_endpoint ... --flink_master ...`:
a Flink job server submits to the pipeline's `--flink_master`.
"""

from __future__ import annotations

import contextlib
import itertools
import dataclasses
import logging
import os
import socket
import threading
import time
from typing import Callable, Iterator, Optional, Sequence
from urllib.parse import urlsplit

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions

from pipelines.build_index import flink_rest_api, job_server, runners, spark_rest_api
from pipelines.common import failures
from pipelines.common.exits import JOB_FAILED

LOG = logging.getLogger('ragsieve.build')

# Longer than what a sound build spends without a count (its SDK workers' start and model load, an index's
# training at a few million chunks), far shorter than "forever".
DEFAULT_STALL_SECONDS = 900.0
# How often the launcher looks at the job's progress.
POLL_SECONDS = 1.0
# Seconds of a job's tasks running on the engine without a worker's count before the view says the workers do
# not reach the launcher: longer than an SDK worker's start and model load on a busy host.
SILENT_SECONDS = 30.0
# Every how many polls a Flink job's failures are read: for one no restart mends, and for the restarts after which
# the live counts are the new attempt's (`LiveCounts.restarted`). Small: Flink's exception history is a short read.
FAILURES_EVERY = 5
# Every how many polls Flink's view of the job is read once the workers' counts reach the launcher: they are the
# progress then, and each read makes Flink's JobManager copy the whole job (every task, its Beam metrics as JSON):
# read every second, that took a JobManager core on a job of 10,000 tasks (a million chunks on one machine).
LOOK_EVERY_COUNTING = 30
# How long a cancellation may take before the build ends anyway.
CANCEL_SECONDS = 15.0
# Seconds a job server elsewhere (`--job_endpoint`) or Flink's JobManager may accept no connection before the
# build counts it lost: a host cut off drops packets, and Beam's stream from a job server there waits on with no
# error (measured: the job finished on Flink, the launcher waited on), a job server that lost its JobManager
# fails the job only after minutes of retries. Far longer than a network blip the stream would survive.
SILENT_SERVICE_SECONDS = 30.0
# Seconds a connection to a service may take before it counts as not answering.
PROBE_SECONDS = 3.0
# Runners that send the job to a job service (short names).
JOB_SERVICE_RUNNERS = ('flink', 'spark', 'portable')
# Embedded engines and job services: nothing to reach before the job starts.
EMBEDDED = ('[local]', '[auto]', '[collection]', 'embed')
# Beam's threads that read the job service's streams (apache_beam.runners.portability.portable_runner).
BEAM_STREAM_THREADS = ('wait_until_finish_read',)


class JobEnded(RuntimeError):
    """A job the launcher ended or lost on an engine: one line, exit status 6 (`exit_code`)."""

    exit_code = JOB_FAILED


def add_flags(parser) -> None:
    """Adds `--engine_stall_timeout` to an argparse parser (or a Beam options parser)."""
    parser.add_argument('--engine_stall_timeout', type=float, default=DEFAULT_STALL_SECONDS,
                        help='Seconds a job on an engine (Flink, Spark, a job service) may go without progress '
                             'before it is cancelled and the build ends with exit status 6; 0: no bound. Progress: '
                             "the workers' live counts once one reached the launcher (off Flink, also while the "
                             "workers run on this machine); on Flink, also Flink's own view of the job through "
                             'its REST API (a task deployed, opening or running; records moving); with neither, '
                             'no bound (the view says so).')


def check_stall_timeout(seconds: float) -> float:
    """Raises:
      ValueError: For a negative or non-finite `--engine_stall_timeout`.
    """
    if not 0 <= seconds < float('inf'):
        raise ValueError(f'--engine_stall_timeout must be 0 (no bound) or a positive number of seconds, got {seconds}')
    return seconds


@dataclasses.dataclass(frozen=True)
class LiveCounts:
    """The workers' live counts as the stall bound sees them (`pipelines/build_index/progress.live_counts`).

    Attributes:
      counts: The counts now.
      arrived: Whether any worker's counts reached the launcher yet.
      local: Whether the workers run on this machine, as far as the flags tell.
      restarted: Takes the times (seconds since the epoch) the engine restarted the whole job: the counts are
        the latest attempt's from then on (`progress.Listener`).
      where: The counts now in words (`View.where`), for the line of a job that stopped.
    """

    counts: Callable[[], object]
    arrived: Callable[[], bool]
    local: bool
    restarted: Callable[[Sequence[float]], None] = lambda times: None
    where: Callable[[], str] = lambda: ''


class Stall:
    """Whether a job's progress stood still for `timeout` seconds (0: never)."""

    def __init__(self, timeout: float, now: float):
        self.timeout = timeout
        self._seen: object = object()
        self._since = now

    def stalled(self, progress, now: float, working: bool = False) -> bool:
        """Takes the progress seen at `now`; True once it has not changed for `timeout` seconds.

        `working` (a task runs on the engine, or nothing can be seen) is progress whatever `progress` is.
        """
        if working or progress != self._seen:
            self._seen, self._since = progress, now
            return False
        return bool(self.timeout) and now - self._since >= self.timeout


class SilentWorkers:
    """Says once that no worker's counts arrived while the engine showed the job's tasks running for `after`
    seconds: the workers do not reach the launcher's address (`--progress_address`)."""

    def __init__(self, after: float = SILENT_SECONDS):
        self.after = after
        self._running_since: Optional[float] = None
        self._said = False

    def note(self, live: Optional[LiveCounts], engine: Optional[flink_rest_api.EngineLook],
             now: float) -> Optional[str]:
        if self._said or live is None or live.local or live.arrived():
            return None
        if engine is None or not engine.running:
            return None
        if self._running_since is None:
            self._running_since = now
        if now - self._running_since < self.after:
            return None
        self._said = True
        return (f"no worker's counts reached this launcher in {now - self._running_since:.0f} s of the job's "
                'tasks running: where the workers cannot reach the address the view named, pass --progress_address '
                'HOST[:PORT] with an address of this launcher they reach (the build goes on)')


def judged(counts_reach: bool, counts,
           engine: Optional[flink_rest_api.EngineLook]) -> Optional[tuple[object, bool]]:
    """`(progress, working)` the stall bound judges at one look; None: nothing to judge by.

    Where the workers' counts are known to reach the launcher, they are the
    progress, with the engine's record counts beside them (a worker whose
    counts do not arrive moves those). Otherwise the engine's view alone,
    where a running task is work: a count that never arrives is no stall.

    Args:
      counts_reach: Whether the workers' counts are known to reach the launcher.
      counts: The live counts now (None without any).
      engine: The engine's view of the job now (None where it shows none).
    """
    if counts_reach:
        return (counts, engine.progress if engine else None), False
    if engine is not None:
        return engine.progress, engine.running
    return None


def counts_reach(live: Optional[LiveCounts], engine_asked: bool) -> bool:
    """Whether the workers' counts are known to reach the launcher: one arrived; or, where no engine can be asked
    about the job (Flink's REST API, a SparkRunner driver's UI), the workers run on this machine (a master on the
    loopback tells nothing of its workers: Flink's JobManager, its TaskManagers on other hosts)."""
    if live is None:
        return False
    return live.arrived() or (live.local and not engine_asked)


def engine(options: PipelineOptions) -> Optional[str]:
    """'flink', 'spark' or 'portable' for a job sent to a job service; None for any other runner."""
    name = runners.short_name(options.view_as(StandardOptions).runner or 'direct')
    return name if name in JOB_SERVICE_RUNNERS else None


def master_address(options: PipelineOptions) -> Optional[tuple[str, str, int]]:
    """`(flag, host, port)` the job is sent to: `--flink_master`, `--spark_master_url`, `--job_endpoint`.

    None for an embedded engine or a runner without one.
    """
    flag = {'flink': 'flink_master', 'spark': 'spark_master_url', 'portable': 'job_endpoint'}.get(engine(options) or '')
    return parse_master(f'--{flag}', options.get_all_options().get(flag)) if flag else None


def parse_master(flag: str, master: Optional[str]) -> Optional[tuple[str, str, int]]:
    """`(flag, host, port)` of a master's address (`HOST:PORT`, a URL); None for an embedded one or none."""
    master = master or ''
    if not master or master in EMBEDDED or master == 'local' or master.startswith('local['):  # not localhost
        return None
    parts = urlsplit(master if '://' in master else f'//{master}')
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        return None  # Beam says what it makes of it
    return flag, parts.hostname, port


def answers(host: str, port: int, timeout: float = PROBE_SECONDS) -> bool:
    """Whether `host:port` accepts a TCP connection within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class SilentServices:
    """Which of a job's services has accepted no connection for `after` seconds, asked now and then.

    Args:
      watched: `(role, host, port)` of each: a job server elsewhere, Flink's
        JobManager (`watched_services`).
    """

    def __init__(self, watched: Sequence[tuple[str, str, int]], after: float = SILENT_SERVICE_SECONDS,
                 answer: Optional[Callable[[str, int], bool]] = None):
        self.watched, self.after = list(watched), after
        self._answer = answer or (lambda host, port: answers(host, port))
        self._silent_since: dict[str, float] = {}

    def lost(self, now: float) -> Optional[str]:
        """The role of the first service silent for `after` seconds by `now`; None while each answers."""
        for role, host, port in self.watched:
            if self._answer(host, port):
                self._silent_since.pop(role, None)
            elif now - self._silent_since.setdefault(role, now) >= self.after:
                return role
        return None


def watched_services(options: PipelineOptions) -> list[tuple[str, str, int]]:
    """`(role, host, port)` of the services whose silence ends a build's wait: a job server elsewhere
    (`--job_endpoint`; one this launcher started breaks Beam's stream when it dies) and Flink's JobManager."""
    watched = []
    endpoint = master_address(options) if engine(options) == 'portable' else None
    if endpoint:
        watched.append(('Beam job server', endpoint[1], endpoint[2]))
    flink = flink_master(options)
    if flink:
        watched.append(('Flink JobManager', flink[1], flink[2]))
    return watched


def check_reachable(options: PipelineOptions, timeout: float = 5.0) -> None:
    """Refuses, before anything loads, an engine's master that nothing answers at.

    Raises:
      ValueError: Naming the flag, the address and why.
    """
    address = master_address(options)
    if address is None:
        return
    flag, host, port = address
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        raise ValueError(f'{flag} {host}:{port}: nothing answers there ({e.strerror or e}); start the cluster '
                         '(python -m engines start ...) or correct the flag') from None


def with_job_name(options: PipelineOptions, token: str) -> PipelineOptions:
    """Names the job `ragsieve-TOKEN` unless `--job_name` names it: how a Flink job is found to cancel it.

    A Flink job server names the Flink job after `--job_name`, whichever runner sent it.
    """
    cloud = options.view_as(GoogleCloudOptions)
    if (engine(options) == 'flink' or flink_rest(options)) and not cloud.job_name:
        cloud.job_name = f'ragsieve-{token}'.lower()
    return options


def flink_master(options: PipelineOptions) -> Optional[tuple[str, str, int]]:
    """`(flag, host, port)` of the Flink cluster the job goes to: `--flink_master` of a FlinkRunner build, or of a
    PortableRunner build (a Flink job server submits to the pipeline's `--flink_master` rather than its own,
    unless it is `[auto]`); None for an embedded Flink, `[auto]`, or another runner."""
    kind = engine(options)
    if kind == 'flink':
        return master_address(options)
    if kind == 'portable' and master_address(options):  # a job server, not Beam's own in this process
        return parse_master('--flink_master', options.get_all_options().get('flink_master'))
    return None


def flink_rest(options: PipelineOptions) -> Optional[str]:
    """Flink's REST API (`flink_master`), None for an embedded Flink or another runner."""
    address = flink_master(options)
    return f'http://{address[1]}:{address[2]}' if address else None


def flink_exceptions(options: PipelineOptions) -> Optional[dict]:
    """Flink's exception history of the build's job (`/jobs/JID/exceptions`); None off Flink or before the job."""
    rest, name = flink_rest(options), options.view_as(GoogleCloudOptions).job_name
    jid = flink_rest_api.latest_job(rest, name) if rest and name else None
    return flink_rest_api.read_json(f'{rest}/jobs/{jid}/exceptions') if jid else None


def flink_failure(options: PipelineOptions) -> Optional[str]:
    """What Flink last recorded as the build's job's failure (`flink_rest_api.failure_line`); None off Flink or
    without one."""
    exceptions = flink_exceptions(options)
    return flink_rest_api.failure_line(exceptions) if exceptions else None


def engine_look(options: PipelineOptions) -> Optional[Callable[[], Optional[flink_rest_api.EngineLook]]]:
    """How to look at the build's job on its engine: Flink's REST API, by the job's name; the web UI of a
    SparkRunner build's driver (`spark_ui`); None elsewhere."""
    rest, name = flink_rest(options), options.view_as(GoogleCloudOptions).job_name
    if rest and name:
        return lambda: flink_rest_api.look(rest, name)
    ui = spark_ui(options)
    return (lambda: spark_rest_api.look(ui)) if ui else None


def spark_ui(options: PipelineOptions) -> Optional[str]:
    """The web UI of a SparkRunner build's driver: the job server Beam starts on this machine, at the port the
    build gave it (`runners.with_spark_ui_port`); None for another runner, or a port the build does not know."""
    port = runners.spark_ui_port(options) if engine(options) == 'spark' else None
    return f'http://127.0.0.1:{port}' if port else None


def stall_note(options: PipelineOptions, local_counts: bool) -> Optional[str]:
    """The view's line where the stall bound cannot see the job until a worker's counts arrive; None elsewhere.

    Args:
      options: The build's pipeline options.
      local_counts: Whether live counts come from workers on this machine.
    """
    kind = engine(options)
    timeout = options.get_all_options().get('engine_stall_timeout', DEFAULT_STALL_SECONDS)
    if kind is None or not timeout or local_counts or flink_rest(options) or spark_ui(options):
        return None
    return (f'--engine_stall_timeout bounds the job only once a worker\'s counts reach this launcher: {kind} shows '
            'no job progress here')


def cancel(result, options: PipelineOptions) -> str:
    """Cancels the job through its job service and, on Flink, by name through the REST API; says what it did."""
    said = []
    done = threading.Event()

    def through_job_service():
        try:
            result.cancel()
            said.append('cancelled through the job service')
        except Exception as e:  # the job server may be gone: the REST API still answers
            said.append(f'the job service did not answer ({type(e).__name__})')
        finally:
            done.set()

    threading.Thread(target=through_job_service, name='ragsieve-cancel', daemon=True).start()
    done.wait(CANCEL_SECONDS)
    rest, name = flink_rest(options), options.view_as(GoogleCloudOptions).job_name
    if rest and name:
        try:
            jobs = flink_rest_api.cancel_jobs(rest, name)
            said.append(f'Flink job {", ".join(jobs)} cancelled' if jobs else 'no Flink job of it runs')
        except (OSError, ValueError) as e:
            said.append(f'Flink did not answer at {rest} ({e})')
    return '; '.join(said) or 'cancellation asked'


def is_lost_job_service(error: BaseException) -> bool:
    """Whether `error` is gRPC's for a job service that stopped answering (a killed job server)."""
    try:
        import grpc
    except ImportError:
        return False
    return isinstance(error, grpc.RpcError)


@contextlib.contextmanager
def quiet_job_messages() -> Iterator[None]:
    """Keeps the job's error messages (the SDK workers' tracebacks) and Beam's stream threads' gRPC errors off stderr.

    The build reports the job's failure in one line, and the engine's logs
    keep the tracebacks; RAGSIEVE_TRACEBACK=1 shows them here too.
    """
    if os.environ.get('RAGSIEVE_TRACEBACK') == '1':
        yield
        return
    root = logging.getLogger()
    drop = _DropJobErrors()
    root.addFilter(drop)
    hook = threading.excepthook

    def quiet_stream_errors(args):
        if not (args.thread is not None and args.thread.name in BEAM_STREAM_THREADS
                and args.exc_value is not None and is_lost_job_service(args.exc_value)):
            hook(args)

    threading.excepthook = quiet_stream_errors
    try:
        yield
    finally:
        threading.excepthook = hook
        root.removeFilter(drop)


class _DropJobErrors(logging.Filter):
    """Drops the job service's error messages that Beam's portable runner logs through the root logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and record.funcName == 'read_messages'
                    and record.pathname.endswith('portable_runner.py'))


def wait(result, options: PipelineOptions, live: Optional[LiveCounts], timeout: float,
         clock: Callable[[], float] = time.monotonic, poll: float = POLL_SECONDS,
         look: Optional[Callable[[], Optional[flink_rest_api.EngineLook]]] = None,
         silent: Callable[[], Optional[str]] = lambda: None, lost: Callable[[], Optional[str]] = lambda: None) -> None:
    """Waits for the job of `result` to finish; on a job service, bounds it and cancels what it leaves.

    Args:
      result: The `PipelineResult` of `pipeline.run()`.
      options: The build's pipeline options.
      live: The workers' live counts, or None without any.
      timeout: `--engine_stall_timeout` (0: no bound).
      clock: Seconds, monotonic.
      poll: Seconds between two looks at the job.
      look: The engine's view of the job now (None while it shows none);
        default: `engine_look`. While neither it nor counts known to reach
        the launcher show anything, only the engine bounds the job (`judged`).
      silent: Which of the job's services no longer answers, in words
        (`engine_services.silent_line`), or None: asked once the job failed,
        stalled or lost its job service, it leads the build's line.
      lost: Why the build's hold on its output was lost, or None, asked at
        each poll (`snapshots.lost_lease`: a store that stopped answering):
        the job is cancelled then, as nothing it writes could be published.

    Raises:
      JobEnded: When the job made no progress for `timeout` seconds, or the
        job service or the build's lease was lost (each way the job was
        cancelled), or the job failed while one of its services does not answer.
      KeyboardInterrupt: After cancelling the job.
    """
    kind = engine(options)
    if kind is None:
        result.wait_until_finish()
        return
    look = look or engine_look(options)
    ended: dict = {}

    def waiter():
        try:
            result.wait_until_finish()
        except BaseException as e:  # handed to the launcher's thread
            ended['error'] = e

    def stalled(engine_now: Optional[flink_rest_api.EngineLook]) -> bool:
        seen = judged(counts_reach(live, look is not None), live.counts() if live else None, engine_now)
        progress, working = seen or (None, True)  # nothing to judge by: the engine alone bounds the job
        return stall.stalled(progress, clock(), working=working)

    stall, unheard = Stall(timeout, clock()), SilentWorkers()
    services = SilentServices(watched_services(options))
    with quiet_job_messages():
        thread = threading.Thread(target=waiter, name='ragsieve-engine-wait', daemon=True)
        thread.start()
        try:
            engine_now = None
            for polls in itertools.count(1):
                thread.join(poll)
                if not thread.is_alive():
                    break
                gone = services.lost(clock()) if polls % FAILURES_EVERY == 0 else None
                if gone:
                    said = silent() or f'the {gone} does not answer'
                    raise JobEnded(f'error: {said} (for {services.after:.0f} s) while the job ran on {kind}: '
                                   f'{cancel(result, options)}; nothing was published')
                if look is not None and polls % FAILURES_EVERY == 0:
                    history = flink_exceptions(options) or {}
                    mendless = flink_rest_api.missing_program_line(history)
                    if mendless:  # every restart fails the same way: minutes of them
                        raise JobEnded(f'error: {mendless}: {cancel(result, options)}; nothing was published')
                    if live is not None and restarts_whole_job(options):
                        live.restarted(flink_rest_api.failure_times(history))
                if look is not None and (polls % LOOK_EVERY_COUNTING == 0 or not counts_reach(live, True)):
                    engine_now = look()
                gone = lost()
                if gone:
                    raise JobEnded(f'error: {leading(silent())}{gone}: {cancel(result, options)}; '
                                   'nothing was published')
                said = unheard.note(live, engine_now, clock())
                if said:
                    LOG.warning(said)
                if timeout and stalled(engine_now):
                    failure = flink_failure(options)  # read before the cancellation adds its own
                    how = cancel(result, options)
                    where = live.where() if live is not None and counts_reach(live, look is not None) else ''
                    at = f' (stopped at: {where})' if where else ''
                    last = f"; Flink's last failure: {failure}" if failure else ''
                    raise JobEnded(f'error: {leading(silent())}the job made no progress on {kind} for {timeout:g} s '
                                   f'(--engine_stall_timeout){at}{last}: {how}; nothing was published')
        except KeyboardInterrupt:
            LOG.warning('interrupted: cancelling the job on %s: %s', kind, cancel(result, options))
            raise
        error = ended.get('error')
        if error is not None and is_lost_job_service(error):
            how = cancel(result, options)
            code = getattr(error, 'code', lambda: None)()
            raise JobEnded(f'error: {leading(silent())}lost the job service '
                           f'({getattr(code, "name", code) or type(error).__name__}) while the job ran on {kind}: '
                           f'{how}; nothing was published') from None
    if error is not None:
        unreached = unreached_flink(result, options)
        if unreached:
            raise JobEnded(unreached) from None
        lost = silent()
        if lost:
            raise JobEnded(f'error: {lost}: {failures.failure_text(error)}') from None
        raise error


def leading(lost: Optional[str]) -> str:
    """`lost` as the head of a failure's line (`LOST: ...`); '' for None."""
    return f'{lost}: ' if lost else ''


def restarts_whole_job(options: PipelineOptions) -> bool:
    """Whether a failover restarts the whole job: Flink's pipelined exchanges (`--execution_mode_for_batch`
    PIPELINED, Beam's default) join a build's stages into one region. With blocking ones (BATCH modes: the
    local engine's) Flink restarts only the failed regions, and the live counts of the others stay."""
    mode = options.get_all_options().get('execution_mode_for_batch') or 'PIPELINED'
    return not str(mode).upper().startswith('BATCH')


def job_endpoint(options: PipelineOptions) -> Optional[str]:
    """`HOST:PORT` of the job server a PortableRunner build goes to (`--job_endpoint`); None for any other."""
    address = master_address(options) if engine(options) == 'portable' else None
    return f'{address[1]}:{address[2]}' if address else None


def unreached_flink(result, options: PipelineOptions) -> Optional[str]:
    """The line of a failed job that a job server (`--job_endpoint`) could not hand to Flink; None otherwise."""
    endpoint = job_endpoint(options)
    return job_server.unreached_flink_line(endpoint, job_server.messages(result)) if endpoint else None
