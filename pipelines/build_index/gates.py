"""The last steps of a build before it is published: its gates, its report, holding a refused run back.

`verdict` checks the gates that read the manifest alone, before the manifest
is written; `check_and_report` runs the canary on the complete run (a query
needs its manifest), writes report.html next to the manifest and, when a
gate refuses, keeps the run from being published and raises `Refused`. The
run LATEST names, or the plain index --output holds, is left as it was.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
from typing import Optional


from pipelines.build_index.manifest import Target
from pipelines.build_index.options import BuildConfig
from transforms import storage
from transforms.output import gates, publish, tables
from transforms.report.page import write_report

LOG = logging.getLogger('ragsieve.build')

# Where a plain build that its gates refused is kept, next to --output, until `ragsieve publish`.
REFUSED_SUFFIX = '.refused'


def refused_path(output: str) -> str:
    return output.rstrip('/') + REFUSED_SUFFIX


def final_directory(config: BuildConfig, target: Target, refused: bool) -> str:
    """Where the run's files are once the build ends: its run directory, --output, or OUTPUT.refused."""
    if config.versioned:
        return target.directory
    return refused_path(config.output) if refused else config.output


def read_manifest(directory: Optional[str]) -> Optional[dict]:
    """The manifest.json of a build directory, or None for no directory."""
    if not directory:
        return None
    def load(path):
        return json.loads(storage.read_bytes(path).decode('utf-8'))

    return tables.load_file(posixpath.join(directory, tables.MANIFEST_FILE), load)


def verdict(config: BuildConfig, manifest: dict, target: Target, canary=None, previous_canary=None) -> dict:
    """The gates' verdict on a run against the build it would replace (see `gates.evaluate`).

    --allow_empty asks to publish even when every record was rejected: the
    absolute rejected share then does not refuse (the gates against the
    previous run still do).
    """
    settings = dataclasses.replace(config.gates, max_rejected_share=1.0) if config.allow_empty else config.gates
    try:
        previous = read_manifest(target.previous)
    except ValueError as e:  # a damaged previous build must not fail every later one
        LOG.warning('the publish gates compare with nothing: %s', e)
        previous = None
    return gates.evaluate(settings, manifest, previous, canary, previous_canary,
                          target.previous_run_id or target.previous)


def canary_results(config: BuildConfig, target: Target, model) -> tuple:
    """The canary asked of the new run and of the previous one: `(result, previous result or None)`."""
    from transforms.query.canary import load_questions, run_canary

    questions = load_questions(config.gates.canary)
    k = config.gates.canary_k
    new = run_canary(target.directory, questions, k, model)
    previous = run_canary(target.previous, questions, k, model) if target.previous else None
    return new, previous


def log_verdict(result: dict) -> None:
    """Logs each gate: a failed one as a warning, so a log filtered at WARNING (a scheduler's) still shows it."""
    for check in result['checks']:
        level = logging.WARNING if check['status'] == gates.FAIL else logging.INFO
        LOG.log(level, 'Gate %s: %s (%s)', check['gate'], check['status'], check['says'])


def check_and_report(config: BuildConfig, target: Target, manifest: dict, model=None) -> dict:
    """Adds the canary to the verdict, writes report.html, and refuses a run a gate failed.

    Call once the run is complete (its manifest written with `verdict`).

    Returns:
      The manifest, with the final verdict.

    Raises:
      gates.Refused: When a gate failed and --gates is on. A versioned run
        stays complete under runs/; a plain one is moved to OUTPUT.refused.
    """
    if config.gates.canary:
        manifest['gates'] = verdict(config, manifest, target, *canary_results(config, target, model))
        storage.write_json(posixpath.join(target.directory, tables.MANIFEST_FILE), manifest)
    result = manifest['gates']
    log_verdict(result)
    written = write_report(target.directory)
    # Where it will be read: a plain build's staging directory is renamed when published or held back.
    LOG.info('Report: %s', posixpath.join(final_directory(config, target, gates.refuses(result)),
                                          posixpath.basename(written)))
    if not gates.refuses(result):
        for line in gates.refusal_lines(result):
            LOG.warning('%s; published anyway (--gates off)', line)
        return manifest
    raise gates.Refused(refusal(config, target, result))


def refusal(config: BuildConfig, target: Target, result: dict) -> str:
    """Holds a refused run back and says why, what is still published, and how to publish it."""
    failed = ''.join(f'\n  {line}' for line in gates.refusal_lines(result))
    if config.versioned:
        kept = (f'run {target.run_id} is complete in {target.directory} but not published; LATEST still '
                f'names {target.previous_run_id or "nothing"}')
        how = f'ragsieve publish --output {config.output} --run {target.run_id}'
    else:
        held = refused_path(config.output)
        publish.publish(target.directory, held)  # replaces an older refused build
        kept = f'the build is kept in {held}; {config.output} was left as it was'
        how = f'ragsieve publish --output {config.output}'
    return f'refused to publish:{failed}\n  {kept}.\n  To publish it after a look: {how}'
