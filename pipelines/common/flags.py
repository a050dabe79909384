"""Parsing a command's flags: errors as one line, and the flags any Beam options class knows (`--chunk_sise`)."""

import argparse
import re


# Flags whose value is a secret (`--s3_secret_access_key`), or may carry one (`--sync`, a store URI's password),
# by name: no message shows their values, whatever their type.
SECRET_FLAG_WORDS = ('secret', 'password', 'token', 'credential')
SECRET_FLAGS = frozenset({'sync'})
MASK = '***'
# A URL's password (`scheme://user:PASSWORD@host`), in any other value shown.
_URL_PASSWORD = re.compile(r'(://[^/@\s:]*:)[^/@\s]*@')


def is_secret(flag: str) -> bool:
    """Whether the value of `flag` (`s3_secret_access_key` or `--s3_secret_access_key`) is never shown."""
    name = flag.lstrip('-').lower()
    return name in SECRET_FLAGS or any(word in name for word in SECRET_FLAG_WORDS)


def shown_value(flag: str, value) -> str:
    """`value` as a message may show it: `***` for a secret flag's, whatever its type; else its repr, URL
    passwords masked."""
    if is_secret(flag):
        return MASK
    return _URL_PASSWORD.sub(rf'\g<1>{MASK}@', repr(value))


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a ValueError (one line), not its usage and an exit."""

    def error(self, message):
        # argparse says "argument --chunk_size: invalid int value: 'abc'".
        raise ValueError(re.sub(r'^argument (\S+): ', r'\1: ', message))



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
