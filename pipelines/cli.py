"""The `ragsieve` command: one sub-command per pipeline module, and how failures reach the user.

Every failure a user can act on ends as one line `ragsieve COMMAND: error:
...` on stderr and a documented exit status (`EXIT_CODES`, the table of
the README and docs/cli.md); only an unexpected error (a bug) prints its traceback.
"""

import argparse
import builtins
import contextlib
import importlib
import logging
import os
import re
import sys
from typing import Iterator, Optional

from pipelines.common import heap, third_party
from transforms.output.gates import REFUSED_EXIT_STATUS

# Sub-command -> module with `run(argv)`; imported only when chosen, so
# `ragsieve query` does not pay for Beam's import.
COMMANDS = {'build': 'pipelines.build_index.job', 'evaluate': 'pipelines.evaluate.job', 'query': 'pipelines.query',
            'sync': 'pipelines.sync'}
COMMANDS.update({'publish': 'pipelines.publish_run', 'report': 'pipelines.report'})
USAGE = f'usage: ragsieve {{{",".join(COMMANDS)}}} [flags...]   (ragsieve COMMAND --help for the flags)'

# Exit statuses; `EXIT_CODES` says what each means and what to do next.
OK, UNEXPECTED, FAILED, INTERRUPTED = 0, 1, 2, 130
# SIGTERM (a scheduler's timeout, `kill`): 128 + its number, as a shell reports a process it ended.
TERMINATED = 143
# `ragsieve sync`: the store differs from the run (--verify), or a batch failed after its retries.
DRIFT, SYNC_FAILED = 3, 4
# `ragsieve build`: a complete run that its publish gates kept from being published (`gates.Refused`).
REFUSED = REFUSED_EXIT_STATUS
# A job an engine (Flink, Spark, Dataflow, a job service) failed or cancelled for a reason of its own.
JOB_FAILED = 6
# Status -> (what it means, what the user does next): the table of the README and docs/cli.md.
EXIT_CODES = {
    OK: ('Done: the build published, the query answered, the evaluation wrote its results. Warnings on '
         'stderr (a damaged previous build compared with nothing, a document that lost most of its chunks) '
         'do not change it.',
         'Nothing; read the warnings, if any.'),
    UNEXPECTED: ('A bug: an error ragsieve did not expect, printed with its traceback. The index published '
                 'before is left as it was.',
                 'Report it with the command line and the traceback.'),
    FAILED: ('One line `ragsieve COMMAND: error: ...` says what cannot be used: a flag (named), a config file '
             'value (the file and key), an input, an output or index (the file), a file that cannot be '
             'written (its path: a full disk, a permission), an output another build holds, a store another '
             'sync holds (named), a damaged run or a store table that is not ragsieve\'s (`ragsieve sync`, '
             'which then changed nothing). Nothing was published; the index published before is left as it was.',
             'Fix what the line names and run again (`ragsieve sync --wait SECONDS` waits for the other sync). '
             '`RAGSIEVE_TRACEBACK=1` adds the traceback.'),
    DRIFT: ('`ragsieve sync --verify`: the store differs from the run (rows missing, extra, stale, held twice '
            'or without an id, or its marker names another run or is not ragsieve\'s); the line counts them, '
            'with examples.',
            'Run `ragsieve sync` without --verify: it converges from any state.'),
    SYNC_FAILED: ('`ragsieve sync`: a batch still failed after its retries (the line names the ids), or the '
                  'sync lost its lock to another; the store\'s marker still names the run it had. '
                  '`build --sync`: the run is published, and its sync failed for any reason (the line says why).',
                  'Fix the store (space, permissions, the server) and run `ragsieve sync` again.'),
    REFUSED: ('`ragsieve build`: the run is complete but a publish gate refused it (docs/operations.md, '
              '"Publish gates"); stderr names each failed gate with its figures. LATEST, or the plain '
              '--output, is left as it was; a plain build is kept in OUTPUT.refused.',
              'Look at the run\'s report.html; fix the input, or publish it with the `ragsieve publish` '
              'command the message gives.'),
    JOB_FAILED: ('`ragsieve build --runner FlinkRunner` (Spark, Dataflow, any job service): the engine failed or '
                 'cancelled the job for a reason of its own (a TaskManager or SDK worker lost beyond its restart '
                 'strategy, its memory, its configuration); the line names the job, its state and the engine\'s '
                 'first error line. Or the build cancelled it: no progress for --engine_stall_timeout seconds, or '
                 'its job service lost. Nothing was published; the index published before is left as it was.',
                 'Read the engine\'s logs for that job, fix the cluster, and run the build again: the next build '
                 'deletes what this one left.'),
    INTERRUPTED: ('Interrupted (Ctrl-C, SIGINT), one line `ragsieve COMMAND: interrupted`. A build stopped before '
                  'it published leaves the index published before as it was.',
                  'Run again: the next build deletes what this one left.'),
    TERMINATED: ('Stopped by SIGTERM (`kill`, a scheduler\'s timeout), one line `ragsieve COMMAND: terminated`; '
                 'as for Ctrl-C, a build stopped before it published leaves the index published before as it was.',
                 'Run again: the next build deletes what this one left.'),
}
# The signals a command ends on cleanly (its locks released, the terminal restored), and the status of each.
STOP_SIGNALS = {'SIGINT': (INTERRUPTED, 'interrupted'), 'SIGTERM': (TERMINATED, 'terminated')}
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


def main(argv=None) -> int:
    """Runs a sub-command; invalid settings exit with 2 and one clear line on stderr.

    With `argv` None it is the process's command (`ragsieve ...`), which
    ends when it returns.
    """
    status = dispatch(list(sys.argv[1:] if argv is None else argv))
    if argv is None:
        heap.spare_exit()
    return status


def dispatch(argv: list[str]) -> int:
    """Runs the sub-command `argv[0]` with the flags after it; returns the exit status."""
    if not argv or argv[0] in ('-h', '--help'):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f'ragsieve: unknown command {command!r}\n{USAGE}', file=sys.stderr)
        return 2
    with heap.loading(), third_party.quiet_imports():  # Beam's import, for most commands
        run = importlib.import_module(COMMANDS[command]).run
    try:
        return run_and_report(command, run, rest)
    finally:
        heap.release()


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a ValueError (one line), not its usage and an exit."""

    def error(self, message):
        # argparse says "argument --chunk_size: invalid int value: 'abc'".
        raise ValueError(re.sub(r'^argument (\S+): ', r'\1: ', message))


def say(line: str) -> None:
    """Prints a command's result line on stdout, after its work is done; a stdout gone loses the line, not the outcome.

    A stdout piped to a logger that died (`BrokenPipeError`) or closed
    must not turn a published build or a finished sync into a failure:
    the line is dropped and stdout pointed at the null device, so the
    interpreter's last flush at exit fails no more.
    """
    try:
        print(line, flush=True)
    except (OSError, ValueError):  # ValueError: stdout closed in this process
        _drop_stdout()


def _drop_stdout() -> None:
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())  # what the buffer still holds goes nowhere at exit
        os.close(null)
    except (OSError, ValueError, AttributeError):
        sys.stdout = open(os.devnull, 'w', encoding='utf-8')  # noqa: SIM115 - lives as long as the process


def exit_codes_table() -> str:
    """`EXIT_CODES` as Markdown, for the README and docs/cli.md."""
    rows = ['| exit status | what it means | what to do next |', '| --- | --- | --- |']
    rows += [f'| `{code}` | {means} | {then} |' for code, (means, then) in EXIT_CODES.items()]
    return '\n'.join(rows) + '\n'


def beam_flag_parser():
    """A parser of every flag some `PipelineOptions` subclass declares: Beam's and the jobs'.

    Built as `PipelineOptions.get_all_options` builds its own, so what it
    knows is exactly what Beam would use rather than silently drop; a bad
    value is a ValueError naming the flag, not Beam's usage.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    class Parser(_BeamArgumentParser):
        error = OneLineParser.error

    parser = Parser(allow_abbrev=False)
    classes = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)  # the documented hook of every options class
    return parser


def check_known_flags(argv, config_keys=(), config_path=None) -> None:
    """Refuses flags and config keys that no options class knows (`--chunk_sise`), and bad values.

    Args:
      argv: The command line flags.
      config_keys: The keys of the `--config` file, if any.
      config_path: That file, for the message.

    Raises:
      ValueError: Naming each unknown flag or key, with the closest known
        flag, or the flag whose value its type or choices refuse.
    """
    import difflib

    parser = beam_flag_parser()
    known = [s for action in parser._actions for s in action.option_strings if s.startswith('--')]

    def describe(flag):
        close = difflib.get_close_matches(flag, known, n=1)
        return f'{flag} (did you mean {close[0]}?)' if close else flag

    bad_keys = [f'--{k}' for k in config_keys if f'--{k}' not in known]
    if bad_keys:
        raise ValueError(f'--config {config_path}: unknown setting(s) '
                         + ', '.join(describe(k)[2:] for k in bad_keys))
    _, rest = parser.parse_known_args(list(argv))
    unknown = [a.split('=', 1)[0] for a in rest if a.startswith('-')]
    if unknown:
        raise ValueError('unknown flag(s) ' + ', '.join(describe(f) for f in unknown))
    if rest:
        raise ValueError(f'unexpected argument(s) {rest}: every setting is a --flag')


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
    OSError one of the environment (a full disk, a missing permission);
    either may reach the launcher from inside a pipeline, wrapped by Beam
    (`root_cause`) or, from workers in other processes, as the text of their
    traceback.
    """
    cause = root_cause(error)
    if isinstance(cause, ValueError):
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


if __name__ == '__main__':
    sys.exit(main())
