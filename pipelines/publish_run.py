"""Publish job: publishes a complete run that its gates refused, once a person has looked.

    ragsieve publish --output ROOT --run RUN_ID   # a versioned root: LATEST names RUN_ID
    ragsieve publish --output OUT                 # a plain build: OUT.refused replaces OUT

Any complete run of a versioned root can be published so (a rollback too).
The root's lock is held meanwhile, as a build holds it, and the run's
manifest is not touched: its gate verdict stays what the build found.
"""

from __future__ import annotations

import argparse
import posixpath
import sys
from typing import Optional, Sequence


from pipelines.build_index import gates as build_gates
from pipelines.common.exits import say
from transforms import storage
from transforms.output import digests, publish, snapshots, tables


def parser() -> argparse.ArgumentParser:
    """The publish flags."""
    p = argparse.ArgumentParser(prog='ragsieve publish',
                                description='Publish a complete run that the publish gates refused.')
    p.add_argument('--output', type=str, required=True,
                   help='The --output of the build: a versioned root, or a plain index directory.')
    p.add_argument('--run', type=str, default=None,
                   help='The run id to publish: required for a versioned root; for a plain build, '
                        'checked against the refused build\'s manifest.')
    return p


def verdict_line(manifest: Optional[dict]) -> str:
    result = (manifest or {}).get('gates')
    if not result:
        return 'it has no gate verdict'
    failed = ', '.join(result['failed'])
    return f'its gates failed ({failed})' if failed else 'its gates passed'


def publish_versioned(root: str, run_id: str) -> str:
    """Points LATEST of `root` at the complete run `run_id`; returns what was done.

    Raises:
      ValueError: If the run id is invalid or names no complete run, its files
        are not those its build wrote (`digests.check_files`), or a build holds the root.
    """
    directory = snapshots.run_dir(root, snapshots.check_run_id(run_id, '--run'))
    with snapshots.lock(root) as held:
        if not storage.exists(posixpath.join(directory, tables.MANIFEST_FILE)):
            complete, _ = snapshots.list_runs(root)
            raise ValueError(f'{directory} is not a complete run (complete runs: {", ".join(complete) or "none"})')
        manifest = build_gates.read_manifest(directory)
        digests.check_files(directory, manifest)  # the files its build wrote, not ones edited since
        before, version = snapshots.read_latest(root), snapshots.latest_version(root)
        snapshots.publish_latest(root, run_id, version, [held])
    return f'LATEST names {run_id} (was {before or "nothing"}); {verdict_line(manifest)}'


def publish_plain(output: str, run_id: Optional[str]) -> str:
    """Replaces the plain index `output` with the build its gates refused; returns what was done.

    Raises:
      ValueError: If there is no refused build, or it is another run than `run_id`.
    """
    held = build_gates.refused_path(output)
    with snapshots.lock_file(output, snapshots.plain_lock_path(output)) as lock:
        if not storage.exists(posixpath.join(held, tables.MANIFEST_FILE)):
            raise ValueError(f'{held} holds no refused build to publish')
        manifest = build_gates.read_manifest(held)
        if run_id is not None and manifest.get('run_id') != run_id:
            raise ValueError(f'{held} holds run {manifest.get("run_id")!r}, not {run_id!r}')
        digests.check_files(held, manifest)
        publish.check_replaceable(output)
        snapshots.check_locks([lock])
        publish.publish(held, output)
    return f'{output} now holds run {manifest.get("run_id")}; {verdict_line(manifest)}'


def run(argv: Optional[Sequence[str]] = None) -> str:
    """Publishes the run; returns the line it printed.

    Raises:
      ValueError: For a run that is missing or incomplete, or a locked output.
    """
    args = parser().parse_args(argv)
    output = args.output.rstrip('/')
    if storage.has_files(posixpath.join(output, snapshots.RUNS_DIR)):
        if not args.run:
            raise ValueError(f'{output} is a versioned root: name the run to publish with --run RUN_ID')
        line = publish_versioned(output, args.run)
    else:
        line = publish_plain(output, args.run)
    say(f'ragsieve publish: {line}')  # published: printing it cannot change that
    return line


if __name__ == '__main__':
    from pipelines.common.failures import run_and_report

    sys.exit(run_and_report('publish', run, sys.argv[1:]))
