"""The build's command line: a `--config` file's settings as flags before the real ones, checked up front.

`parse_args` reads the flags `options.BuildIndexOptions` declares and
Beam's, those of a YAML or JSON `--config` file first so explicit flags win
(`config_flags`, each setting checked by its flag's parser, so an error
names the file and the key), and refuses what no build could run: an
unknown flag, a runner a build cannot run on, a Dataflow job whose workers
would lack ragsieve.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.build_index import dataflow_job
from pipelines.build_index.options import ON_OFF_FLAGS
from pipelines.build_index.runners import check_runner, with_engine_defaults
from pipelines.common.flags import MASK, beam_flag_parser, check_known_flags, is_secret, shown_value


def config_flags(path: str) -> list[str]:
    """Turns a YAML/JSON config file into flags, to be placed before the real ones.

    Each setting is checked on its own, so that an error names the file and
    the key (`config_flag`).

    Raises:
      ValueError: Naming the file, if it is unreadable, not UTF-8, not a
        mapping of flag names, gives a setting twice, or a setting is
        unknown or has a value its flag refuses.
    """
    import yaml  # JSON is a subset of YAML, so one parser reads both

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f'cannot read --config {path}: {e.strerror or e}') from e
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError as e:
        raise ValueError(f'--config {path} is not UTF-8 text (invalid byte at offset {e.start})') from None
    try:
        values = yaml.load(text, Loader=_unique_keys_loader())
    except DuplicateKey as e:
        raise ValueError(f'--config {path}: {e}') from None
    except yaml.YAMLError as e:
        raise ValueError(f'cannot read --config {path}: {_yaml_problem(e)}') from None
    if not isinstance(values, dict):
        raise ValueError(f'--config {path} must hold a mapping of settings')
    check_known_flags([], [str(k) for k in values], path)
    parser = beam_flag_parser()
    actions = {s[2:]: a for a in parser._actions for s in a.option_strings if s.startswith('--')}
    flags = []
    for key, value in values.items():
        flags += config_flag(path, str(key), value, actions[str(key)], parser)
    return flags


def _yaml_problem(error) -> str:
    """What is wrong with a config file's YAML and where, without the lines YAML quotes (they may hold a secret)."""
    mark = getattr(error, 'problem_mark', None)
    said = ': '.join(str(p) for p in (getattr(error, 'context', None), getattr(error, 'problem', None)) if p)
    if not said:
        return type(error).__name__
    return f'{said} (line {mark.line + 1}, column {mark.column + 1})' if mark is not None else said


# Flags whose value is a comma-separated list: a config file may give it as a YAML list.
LIST_FLAGS = frozenset({'filter', 'entity_labels', 'dedup_scope', 'max_file_bytes'})


class DuplicateKey(ValueError):
    """A key given twice in one mapping of a config file."""


def _unique_keys_loader():
    """A safe YAML loader that refuses a key given twice in one mapping (YAML and JSON keep the last)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            mark = key_node.start_mark
            where = f'line {mark.line + 1} column {mark.column + 1}'
            try:
                if key in seen:
                    raise DuplicateKey(f'{key!r} is given twice ({seen[key]} and {where}): keep one')
                seen[key] = where
            except TypeError:  # an unhashable key: the base constructor says so
                continue
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return UniqueKeyLoader


def config_flag(path: str, key: str, value, action: argparse.Action, parser: argparse.ArgumentParser) -> list[str]:
    """The flags of one config setting (none for a false on/off flag), checked by its flag's parser.

    Raises:
      ValueError: `--config PATH: KEY ...` when the value is missing (null),
        a mapping, a list for a flag that takes one value (`chunk_size:
        [200]`; only LIST_FLAGS take lists), of the wrong kind for its flag,
        or one its flag refuses, and for a nested `config:` (one file holds
        every setting).
    """
    where = f'--config {path}: {key}'
    shown = shown_value(key, value)  # a secret's value is never shown, whatever its type
    if key == 'config':
        raise ValueError(f'{where}: a config file cannot name another config file ({shown}); '
                         'put its settings in this one')
    if value is None:
        raise ValueError(f'{where} has no value (null): give one, or remove the key for the default')
    if isinstance(value, dict):
        raise ValueError(f'{where} must be a value or a list, not a mapping')
    on_off_flag = isinstance(action, argparse._StoreTrueAction)
    if isinstance(value, bool) and key in ON_OFF_FLAGS:
        # YAML reads a bare `deltas: off` as false.
        value = 'on' if value else 'off'
    elif on_off_flag or isinstance(value, bool):
        if not (on_off_flag and isinstance(value, bool)):
            expected = 'true or false' if on_off_flag else 'a value'
            raise ValueError(f'{where} must be {expected}, not {"true/false" if isinstance(value, bool) else shown}')
        # On/off flags take no value: `versioned: true` is `--versioned`.
        return [f'--{key}'] if value else []
    if isinstance(value, (list, tuple)):
        if isinstance(action, argparse._AppendAction):  # a flag given once per item
            return [flag for item in value for flag in config_flag(path, key, item, action, parser)]
        # Beam's --experiments and the like take comma-separated lists too.
        if key not in LIST_FLAGS and type(action).__name__ != '_CommaSeparatedListAction':
            raise ValueError(f'{where} must be one value, not a list ({shown})')
        if any(isinstance(v, (list, tuple, dict)) or v is None for v in value):
            raise ValueError(f'{where} must be a list of values, not {shown}')
        value = ','.join(str(v) for v in value)
    flag = f'--{key}={value}'
    try:
        parser.parse_known_args([flag])
    except ValueError as e:  # `--KEY: invalid int value: 'abc'`: the key is named already
        said = re.sub(r'^--[^:]+: ', '', str(e))
        if is_secret(key):
            said = said.replace(repr(str(value)), MASK).replace(str(value), MASK)
        raise ValueError(f'{where}: {said}') from None
    return [flag]


def parse_args(argv: Optional[Sequence[str]]) -> PipelineOptions:
    """Parses flags, with those from `--config` first so explicit flags win.

    Raises:
      ValueError: For an unknown flag or config key, a value a flag refuses
        (naming the config file and key when it came from one), or a runner
        ragsieve cannot run on (`check_runner`), a Dataflow job whose
        workers would lack ragsieve, or an engine's SDK workers that cannot
        start (`with_engine_defaults`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument('--config')
    known, _ = pre.parse_known_args(argv)
    check_known_flags(argv)
    if known.config:
        argv = config_flags(known.config) + argv
    options = PipelineOptions(argv)
    check_runner(options.view_as(StandardOptions).runner)
    dataflow_job.dry_run(options)  # refuses a --dry_run Beam would misread
    dataflow_job.check_workers_get_ragsieve(options)
    return with_engine_defaults(options)
