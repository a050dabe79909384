"""How a command's failure reaches the user: one line `ragsieve COMMAND: error: ...` and a documented status.

Every failure a user can act on ends as one line on stderr and a status of
`exits.EXIT_CODES`; only an unexpected error (a bug) prints its traceback.
`run_and_report` runs a command so; the commands' `python -m` entries call it too.
"""

import builtins
import contextlib
import logging
import os
import re
import sys
from typing import Iterator, Optional

from pipelines.common.exits import FAILED, JOB_FAILED, OK, STOP_SIGNALS

# Set to 1 to see the traceback of a one-line error (and Beam's logs of it) too.
TRACEBACK_ENV = 'RAGSIEVE_TRACEBACK'

# Beam appends the step to an error raised inside a pipeline: reported without it.
_STEP_ANNOTATION = re.compile(r" \[while running '[^']*'\]")
# The last `Name: message` line of a traceback that reached us as text (other
# processes' workers: multi_processing DirectRunner, portable runners).
_EXCEPTION_LINE = re.compile(r'^([A-Za-z_][\w.]*): (.*\S)\s*$')
# How a portable job's failure reaches the launcher (Beam's PipelineResult.wait_until_finish).
_FAILED_JOB = re.compile(r'^Pipeline (\S+) failed in state (\w+): (.*)', re.DOTALL)
# The logger through which Beam logs an in-process step's error with its traceback before re-raising it.
BEAM_STEP_LOGGER = 'apache_beam.runners.common'


def root_cause(error: BaseException) -> BaseException:
    """The error itself, or the one Beam wrapped it in.

    Beam re-raises an error of a step as the same type with the step's name
    appended; a type it cannot rebuild so (OSError, whose first argument is a
    number) becomes a RuntimeError tagged `_tagged_with_step`, raised while
    handling the original, which is its `__context__`.
    """
    seen = set()
    while (getattr(error, '_tagged_with_step', False) and not isinstance(error, (ValueError, OSError))
           and error.__context__ is not None and id(error) not in seen):
        seen.add(id(error))
        error = error.__context__
    return error


def reported_error(error: BaseException) -> Optional[str]:
    """The one line a failure is reported as, or None for an unexpected error (a bug).

    A ValueError is one of the clear errors ragsieve raises (bad settings,
    inputs, indexes; `storage.WriteError` for a file it cannot write), an
    OSError one of the environment (a full disk, a missing permission), and
    so is an object store's refusal (a missing or denied bucket, refused
    credentials: `store_error_line`); each may reach the launcher from
    inside a pipeline, wrapped by Beam (`root_cause`) or, from workers in
    other processes, as the text of their traceback.
    """
    cause = root_cause(error)
    from transforms.storage import retries  # here: importing the storage package imports Beam's filesystems

    store = (None if isinstance(cause, ValueError) else retries.unreachable_line(cause)) or store_error_line(cause)
    if store is not None:
        message = store
    elif isinstance(cause, ValueError):
        message = str(cause)
    elif isinstance(cause, OSError):
        message = os_error_line(cause)
    elif isinstance(cause, RuntimeError):
        message = remote_error_line(str(cause))
    else:
        message = None
    if message is None:
        return None
    lines = [line.strip() for line in _STEP_ANNOTATION.sub('', message).splitlines()]
    return ' '.join(line for line in lines if line) or type(cause).__name__


def store_error_line(error: BaseException) -> Optional[str]:
    """`PATH: what the store said it was` of an object store's error however Beam wrapped it, or None.

    Beam reports a failed listing or `exists` as a `BeamIOError` holding a
    dict of the errors per path: its text is a dump, not a line.
    """
    from transforms.storage import buckets

    details = getattr(error, 'exception_details', None)
    if isinstance(error, OSError) and not isinstance(details, dict):
        return None  # an OSError of its own names its file (`os_error_line`)
    problem = buckets.store_problem(error)
    if problem is None:
        return None
    paths = [str(p) for p in details] if isinstance(details, dict) else []
    return f'{", ".join(paths)}: {problem}' if paths else problem


def os_error_line(error: OSError) -> str:
    """`PATH: why` of an OSError (both paths of a rename), or its message when it names none."""
    if error.strerror and error.filename is not None:
        paths = ' -> '.join(str(p) for p in (error.filename, error.filename2) if p is not None)
        return f'{paths}: {error.strerror}'
    return str(error)


def _reported_names() -> set[str]:
    from transforms.storage import WriteError

    names = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, (ValueError, OSError))}
    return names | {WriteError.__name__}


def failed_job_line(error: BaseException) -> Optional[str]:
    """The one line of a job an engine failed or cancelled, or None for any other error.

    An error a ragsieve worker raised is reported as itself first
    (`reported_error`); what is left is the engine's own: its first line
    names it (`java.io.IOException: Insufficient number of network buffers`).
    """
    match = _FAILED_JOB.match(str(error)) if isinstance(error, RuntimeError) else None
    if match is None:
        return None
    job, state, text = match.groups()
    reason = next((line.strip() for line in text.splitlines() if line.strip()), 'no reason given')
    return f'the engine ended job {job} {state}: {reason}; nothing was published'


def failure_text(error: BaseException) -> str:
    """A job's failure in one line, however it reached the launcher: a reported error (`reported_error`), the
    engine's (`failed_job_line`), else the error's first line."""
    line = reported_error(error) or failed_job_line(error)
    if line:
        return line if line.endswith('nothing was published') else f'{line}; nothing was published'
    first = next((text.strip() for text in str(error).splitlines() if text.strip()), type(error).__name__)
    return f'{first[:400]}; nothing was published'


def remote_error_line(text: str) -> Optional[str]:
    """The message of a reported error in the text of a worker's traceback, or None."""
    if 'Traceback (most recent call last)' not in text:
        return None
    names = _reported_names()
    for line in reversed(text.splitlines()):
        match = _EXCEPTION_LINE.match(line.strip())
        if match:
            return match.group(2) if match.group(1).rsplit('.', 1)[-1] in names else None
    return None


class _DropReportedErrors(logging.Filter):
    """Drops Beam's log of a step's error that will be reported in one line anyway (a signal's too)."""

    def __init__(self, stopped: Optional[list] = None):
        super().__init__()
        self.stopped = stopped if stopped is not None else []

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and (self.stopped or isinstance(error, KeyboardInterrupt)):
            return False
        return error is None or reported_error(error) is None


@contextlib.contextmanager
def stop_signals() -> Iterator[list]:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread while the block runs; yields the names received.

    Beam wraps an interrupt raised inside a step (`RuntimeError:
    KeyboardInterrupt [while running ...]`), so the signal is remembered
    here rather than read from the error. Raising unwinds the command's
    context managers: its locks, its temporary files, the terminal's cursor.
    """
    import signal
    import threading

    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def stop(number, frame):
        received.append(signal.Signals(number).name)
        raise KeyboardInterrupt(received[-1])

    before = {name: signal.signal(getattr(signal, name), stop) for name in STOP_SIGNALS}
    try:
        yield received
    finally:
        for name, handler in before.items():
            signal.signal(getattr(signal, name), handler)


@contextlib.contextmanager
def quiet_beam_errors(stopped: Optional[list] = None):
    """Keeps Beam from logging the traceback of an error `run_and_report` reports in one line."""
    logger = logging.getLogger(BEAM_STEP_LOGGER)
    drop = _DropReportedErrors(stopped)
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def run_and_report(command: str, run, argv) -> int:
    """Calls `run(argv)` and returns the exit status; a failure is one line on stderr.

    A reported error (`reported_error`) is `ragsieve COMMAND: error: ...`
    and exit 2, an error with an `exit_code` one line and that status;
    SIGINT (Ctrl-C) is exit 130 and SIGTERM 143, one line each, however
    Beam wrapped them (`stop_signals`); anything else is a bug and propagates with
    its traceback (exit 1). With RAGSIEVE_TRACEBACK=1 the traceback of a
    reported error is printed before its line.

    The modules' own `__main__` blocks call this with their `run`: going through
    `main` would import the module a second time, and Beam would then see
    its options class registered twice (conflicting flags).
    """
    show_traceback = os.environ.get(TRACEBACK_ENV) == '1'
    received: list[str] = []
    try:
        with contextlib.ExitStack() as stack:
            received = stack.enter_context(stop_signals())
            if not show_traceback:
                stack.enter_context(quiet_beam_errors(received))
            run(argv)
    except BaseException as e:
        if received or isinstance(e, KeyboardInterrupt):
            # However Beam wrapped it: the signal decides the status, in one line.
            status, word = STOP_SIGNALS[received[0] if received else 'SIGINT']
            print(f'ragsieve {command}: {word}', file=sys.stderr)
            return status
        if not isinstance(e, Exception):
            raise
        return _failure(command, e, show_traceback)
    return OK


def _failure(command: str, e: Exception, show_traceback: bool) -> int:
    """The status of a failed command, its one line printed; re-raises a bug."""
    code = getattr(e, 'exit_code', None)  # an error that carries its own status (sync's drift)
    if code is not None:
        print(f'ragsieve {command}: {e}', file=sys.stderr)
        return code
    line = reported_error(e)
    if line is None:
        failed = failed_job_line(e)
        if failed is None:
            raise
        print(f'ragsieve {command}: error: {failed}', file=sys.stderr)
        return JOB_FAILED
    if show_traceback:
        import traceback

        traceback.print_exc()
    print(f'ragsieve {command}: error: {line}', file=sys.stderr)
    return FAILED
