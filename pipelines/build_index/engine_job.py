"""Waiting for a build's job on an engine (Flink, Spark, a job service): a bound on a job without progress, its cancellation.

Beam's portable runner waits for a job as long as its job service answers:
a Spark job whose only worker died waits for resources forever, and a job
whose launcher stopped waiting (a job server killed, Ctrl-C) runs on in the
cluster and writes into a run directory the build has given up. So a build
on an engine waits through `wait`: a job that shows no progress for
`--engine_stall_timeout` seconds is cancelled and ends the build with one
line and exit status 6 (`JOB_FAILED`), a lost job server too, and Ctrl-C
cancels the job before the build exits 130. Progress is the workers' live
counts (`pipelines/build_index/progress.py`); without them (workers elsewhere,
`--progress none`) nothing bounds the job but the engine. The job is
cancelled through its job service, and a Flink job also through Flink's REST
API by its name (`job_name`), which still answers when the job server is gone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Callable, Iterator, Optional
from urllib.parse import urlsplit

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions

from pipelines.build_index import runners
from pipelines.common.exits import JOB_FAILED

LOG = logging.getLogger('ragsieve.build')

# Longer than what a sound build spends without a count (its SDK workers' start and model load, an index's
# training at a few million chunks), far shorter than "forever".
DEFAULT_STALL_SECONDS = 900.0
# How often the launcher looks at the job's progress.
POLL_SECONDS = 1.0
# How long a cancellation may take before the build ends anyway.
CANCEL_SECONDS = 15.0
# Runners that send the job to a job service (short names).
JOB_SERVICE_RUNNERS = ('flink', 'spark', 'portable')
# Embedded engines and job services: nothing to reach before the job starts.
EMBEDDED = ('[local]', '[auto]', '[collection]', 'embed')
# Flink's job states after which a job runs no more.
FLINK_TERMINAL = ('FINISHED', 'FAILED', 'CANCELED', 'SUSPENDED')
# Beam's threads that read the job service's streams (apache_beam.runners.portability.portable_runner).
BEAM_STREAM_THREADS = ('wait_until_finish_read',)


class JobEnded(RuntimeError):
    """A job the launcher ended or lost on an engine: one line, exit status 6 (`exit_code`)."""

    exit_code = JOB_FAILED


def add_flags(parser) -> None:
    """Adds `--engine_stall_timeout` to an argparse parser (or a Beam options parser)."""
    parser.add_argument('--engine_stall_timeout', type=float, default=DEFAULT_STALL_SECONDS,
                        help='Seconds a job on an engine (Flink, Spark, a job service) may go without progress '
                             "in the workers' live counts before it is cancelled and the build ends with exit "
                             'status 6; 0: no bound. Needs live counts (workers on this machine, --progress not '
                             'none).')


def check_stall_timeout(seconds: float) -> float:
    """Raises:
      ValueError: For a negative or non-finite `--engine_stall_timeout`.
    """
    if not 0 <= seconds < float('inf'):
        raise ValueError(f'--engine_stall_timeout must be 0 (no bound) or a positive number of seconds, got {seconds}')
    return seconds


class Stall:
    """Whether a job's progress stood still for `timeout` seconds (0: never)."""

    def __init__(self, timeout: float, now: float):
        self.timeout = timeout
        self._seen: object = object()
        self._since = now

    def stalled(self, progress, now: float) -> bool:
        """Takes the progress seen at `now`; True once it has not changed for `timeout` seconds."""
        if progress != self._seen:
            self._seen, self._since = progress, now
            return False
        return bool(self.timeout) and now - self._since >= self.timeout


def engine(options: PipelineOptions) -> Optional[str]:
    """'flink', 'spark' or 'portable' for a job sent to a job service; None for any other runner."""
    name = runners.short_name(options.view_as(StandardOptions).runner or 'direct')
    return name if name in JOB_SERVICE_RUNNERS else None


def master_address(options: PipelineOptions) -> Optional[tuple[str, str, int]]:
    """`(flag, host, port)` the job is sent to: `--flink_master`, `--spark_master_url`, `--job_endpoint`.

    None for an embedded engine or a runner without one.
    """
    values = options.get_all_options()
    flag = {'flink': 'flink_master', 'spark': 'spark_master_url', 'portable': 'job_endpoint'}.get(engine(options) or '')
    master = (values.get(flag) if flag else None) or ''
    if not master or master in EMBEDDED or master == 'local' or master.startswith('local['):  # not localhost
        return None
    parts = urlsplit(master if '://' in master else f'//{master}')
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        return None  # Beam says what it makes of it
    return f'--{flag}', parts.hostname, port


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
    """Names the job `ragsieve-TOKEN` unless `--job_name` names it: how a Flink job is found to cancel it."""
    cloud = options.view_as(GoogleCloudOptions)
    if engine(options) == 'flink' and not cloud.job_name:
        cloud.job_name = f'ragsieve-{token}'.lower()
    return options


def flink_rest(options: PipelineOptions) -> Optional[str]:
    address = master_address(options) if engine(options) == 'flink' else None
    return f'http://{address[1]}:{address[2]}' if address else None


def cancel_on_flink(rest: str, name: str, timeout: float = 5.0) -> list[str]:
    """Cancels the Flink jobs named `name` that still run, through Flink's REST API; returns their ids."""
    with urllib.request.urlopen(f'{rest}/jobs/overview', timeout=timeout) as answer:
        jobs = json.load(answer).get('jobs', [])
    cancelled = []
    for job in jobs:
        if job.get('name') == name and job.get('state') not in FLINK_TERMINAL:
            request = urllib.request.Request(f'{rest}/jobs/{job["jid"]}?mode=cancel', method='PATCH')
            with urllib.request.urlopen(request, timeout=timeout):
                cancelled.append(job['jid'])
    return cancelled


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
            jobs = cancel_on_flink(rest, name)
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


def wait(result, options: PipelineOptions, progress: Optional[Callable[[], object]], timeout: float,
         clock: Callable[[], float] = time.monotonic, poll: float = POLL_SECONDS) -> None:
    """Waits for the job of `result` to finish; on a job service, bounds it and cancels what it leaves.

    Args:
      result: The `PipelineResult` of `pipeline.run()`.
      options: The build's pipeline options.
      progress: Returns the job's progress now (the live counts), or None
        when there is none to see: then only the engine bounds the job.
      timeout: `--engine_stall_timeout` (0: no bound).

    Raises:
      JobEnded: When the job made no progress for `timeout` seconds, or the
        job service was lost; either way the job was cancelled.
      KeyboardInterrupt: After cancelling the job.
    """
    kind = engine(options)
    if kind is None:
        result.wait_until_finish()
        return
    ended: dict = {}

    def waiter():
        try:
            result.wait_until_finish()
        except BaseException as e:  # handed to the launcher's thread
            ended['error'] = e

    stall = Stall(timeout if progress is not None else 0, clock())
    with quiet_job_messages():
        thread = threading.Thread(target=waiter, name='ragsieve-engine-wait', daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(poll)
                if thread.is_alive() and progress is not None and stall.stalled(progress(), clock()):
                    how = cancel(result, options)
                    raise JobEnded(f'error: the job made no progress on {kind} for {timeout:g} s '
                                   f'(--engine_stall_timeout): {how}; nothing was published')
        except KeyboardInterrupt:
            LOG.warning('interrupted: cancelling the job on %s: %s', kind, cancel(result, options))
            raise
        error = ended.get('error')
        if error is not None and is_lost_job_service(error):
            how = cancel(result, options)
            code = getattr(error, 'code', lambda: None)()
            raise JobEnded(f'error: lost the job service ({getattr(code, "name", code) or type(error).__name__}) '
                           f'while the job ran on {kind}: {how}; nothing was published') from None
    if error is not None:
        raise error
