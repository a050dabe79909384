"""How a command ends: its result line on stdout, its exit status, and what each status means.

`EXIT_CODES` is the table of the README and docs/cli.md; `say` prints a
result line that a closed stdout cannot turn into a failure.
"""

import os
import sys

from transforms.output.gates import REFUSED_EXIT_STATUS

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
             'value (the file and key), an input, an output or index (the file), an object store\'s refusal (a URL '
             'without a bucket, a missing or denied bucket, refused credentials: the flag and URL), a file that '
             'cannot be written (its path: a full disk, a permission), an output another build holds, a store another '
             'sync holds (named), a damaged run or a store table that is not ragsieve\'s (`ragsieve sync`, '
             'which then changed nothing). Nothing was published; the index published before is left as it was.',
             'Fix what the line names and run again (`ragsieve sync --wait SECONDS` waits for the other sync). '
             '`RAGSIEVE_TRACEBACK=1` adds the traceback.'),
    DRIFT: ('`ragsieve sync --verify`: the store differs from the run (rows missing, extra, stale, held twice '
            'or without an id, or its marker names another run or is not ragsieve\'s); the line counts them, '
            'with examples.',
            'Run `ragsieve sync` without --verify: it converges from any state.'),
    SYNC_FAILED: ('`ragsieve sync`: a batch still failed after its retries (the line names the ids; the store\'s '
                  'marker still names the run it had), or the sync lost its lock to another (LanceDB and PostgreSQL '
                  'then take none of its writes: the store is the other sync\'s). '
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
