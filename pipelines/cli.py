"""The `ragsieve` command: one sub-command per pipeline module."""

import importlib
import sys

# Sub-command -> module with `run(argv)`; imported only when chosen, so
# `ragsieve query` does not pay for Beam's import.
COMMANDS = {'build': 'pipelines.build_index', 'evaluate': 'pipelines.evaluate', 'query': 'pipelines.query'}
COMMANDS.update({'publish': 'pipelines.publish_run', 'report': 'pipelines.report'})
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


def beam_flag_parser():
    """A parser of every flag some `PipelineOptions` subclass declares: Beam's and the jobs'.

    Built as `PipelineOptions.get_all_options` builds its own, so what it
    knows is exactly what Beam would use rather than silently drop.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    classes = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)  # the documented hook of every options class
    return parser


def check_known_flags(argv, config_keys=(), config_path=None) -> None:
    """Refuses flags and config keys that no options class knows (`--chunk_sise`).

    Args:
      argv: The command line flags.
      config_keys: The keys of the `--config` file, if any.
      config_path: That file, for the message.

    Raises:
      ValueError: Naming each unknown flag or key, with the closest known flag.
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


def run_and_report(command: str, run, argv) -> int:
    """Calls `run(argv)`; a ValueError becomes one line on stderr and exit code 2, a refused publish 5.

    The modules' own `__main__` blocks call this with their `run`: going through
    `main` would import the module a second time, and Beam would then see
    its options class registered twice (conflicting flags).
    """
    from transforms.output.gates import Refused

    try:
        run(argv)
    except ValueError as e:
        print(f'ragsieve {command}: error: {e}', file=sys.stderr)
        return 2
    except Refused as e:  # a complete run its publish gates kept back
        print(f'ragsieve {command}: {e}', file=sys.stderr)
        return e.exit_status
    return 0


if __name__ == '__main__':
    sys.exit(main())
