"""The `ragsieve` command: one sub-command per pipeline module."""

import sys

USAGE = 'usage: ragsieve {build,evaluate} [flags...]   (ragsieve COMMAND --help for the flags)'


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == 'build':
        from pipelines import build_index

        try:
            build_index.run(rest)
        except ValueError as e:
            print(f'ragsieve build: error: {e}', file=sys.stderr)
            return 2
        return 0
    if command == 'evaluate':
        from pipelines import evaluate

        try:
            evaluate.run(rest)
        except ValueError as e:
            print(f'ragsieve evaluate: error: {e}', file=sys.stderr)
            return 2
        return 0
    print(f'ragsieve: unknown command {command!r}\n{USAGE}', file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main())
