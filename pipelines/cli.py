"""The `ragsieve` command: one sub-command per job, each a module with `run(argv)`.

How a command ends (its exit statuses) and how its failures reach the user
(one line on stderr) are pipelines/common/exits.py and failures.py.
"""

import importlib
import sys

from pipelines.common import heap, third_party
from pipelines.common.failures import run_and_report

# Sub-command -> module with `run(argv)`; imported only when chosen, so
# `ragsieve query` does not pay for Beam's import.
COMMANDS = {'build': 'pipelines.build_index.job', 'evaluate': 'pipelines.evaluate.job', 'query': 'pipelines.query',
            'sync': 'pipelines.sync'}
COMMANDS.update({'publish': 'pipelines.publish_run', 'report': 'pipelines.report'})
USAGE = f'usage: ragsieve {{{",".join(COMMANDS)}}} [flags...]   (ragsieve COMMAND --help for the flags)'


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


if __name__ == '__main__':
    sys.exit(main())
