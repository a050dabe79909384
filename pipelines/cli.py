"""The `ragsieve` command: one sub-command per pipeline module."""

import importlib
import sys

# Sub-command -> module with `run(argv)`; imported only when chosen, so
# `ragsieve query` does not pay for Beam's import.
COMMANDS = {'build': 'pipelines.build_index', 'evaluate': 'pipelines.evaluate', 'query': 'pipelines.query'}
USAGE = f'usage: ragsieve {{{",".join(COMMANDS)}}} [flags...]   (ragsieve COMMAND --help for the flags)'


def main(argv=None) -> int:
    """Runs a sub-command; invalid settings exit with 2 and one clear line on stderr."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f'ragsieve: unknown command {command!r}\n{USAGE}', file=sys.stderr)
        return 2
    return run_and_report(command, importlib.import_module(COMMANDS[command]).run, rest)


def run_and_report(command: str, run, argv) -> int:
    """Calls `run(argv)`; a ValueError becomes one line on stderr and exit code 2.

    The modules' own `__main__` blocks call this with their `run`: going through
    `main` would import the module a second time, and Beam would then see
    its options class registered twice (conflicting flags).
    """
    try:
        run(argv)
    except ValueError as e:
        print(f'ragsieve {command}: error: {e}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
