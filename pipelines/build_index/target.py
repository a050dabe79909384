"""A run's directory: picked and cleared of what killed runs left, its paths checked, its locks, its discarding."""

from __future__ import annotations

import logging
import posixpath

from pipelines.build_index.manifest import Target, previous_build
from pipelines.build_index.options import BuildConfig
from transforms import storage
from transforms.features import cache as feature_cache
from transforms.ingest.listing import check_input
from transforms.output import gates, publish, snapshots, tables

LOG = logging.getLogger('ragsieve.build')


def prepare_target(config: BuildConfig) -> tuple[Target, list[str]]:
    """Picks this run's directory and deletes what killed runs left behind.

    Call with the output's lock held (see `build_locks`).

    Returns:
      The target and the deleted leftovers.

    Raises:
      ValueError: If the output cannot be replaced or the run id is taken.
    """
    debris = feature_cache.delete_incomplete(config.cache) if config.cache else []
    if not config.versioned:
        debris += publish.clean_staging(config.output)
        publish.check_replaceable(config.output)
        previous, _ = previous_build(config.output, versioned=False)
        return Target(snapshots.new_run_id(), publish.staging_path(config.output), previous, None), debris
    debris += snapshots.clean_debris(config.output)
    run_id = config.run_id or snapshots.new_run_id()
    directory = snapshots.run_dir(config.output, run_id)
    if storage.exists(posixpath.join(directory, tables.MANIFEST_FILE)):
        raise ValueError(f'run {run_id!r} already exists under {config.output}: choose another --run_id')
    latest_version = snapshots.latest_version(config.output)  # the state this run's publish is conditional on
    previous, previous_run_id = previous_build(config.output, versioned=True)
    return Target(run_id, directory, previous, previous_run_id, latest_version), debris


def check_paths(config: BuildConfig) -> None:
    """Refuses outputs and caches that cannot be written, before any work.

    Raises:
      ValueError: If --input lists no file or overlaps --output or --cache,
        --output or --cache names an existing file, or --versioned names a
        directory that is no versioned root.
    """
    check_input(config.input, {'--output': config.output, '--cache': config.cache})
    if config.versioned:
        snapshots.check_root(config.output)
    else:
        publish.check_replaceable(config.output)
    if config.cache and not storage.is_remote(config.cache):
        import os

        if os.path.exists(config.cache) and not os.path.isdir(config.cache):
            raise ValueError(f'--cache {config.cache!r} is a file, not a directory')


def build_locks(config: BuildConfig) -> list[tuple[str, str]]:
    """`(lock file, root it guards)` of the output and of the cache, in a fixed order."""
    output = config.output
    locks = {(posixpath.join(output, snapshots.LOCK_FILE) if config.versioned
              else snapshots.plain_lock_path(output), output)}
    if config.cache:
        locks.add((posixpath.join(config.cache, snapshots.LOCK_FILE), config.cache))
    return sorted(locks)


def discard(config: BuildConfig, target: Target, error: BaseException) -> None:
    """Deletes what a failed run wrote: its staging directory, or its run unless its gates refused it.

    A complete run that its gates refused is kept for `ragsieve publish`;
    any other failed run is deleted, complete or not (a run that lost its
    lease or found LATEST changed after its manifest was written is never
    published). The run's directory is its own by its run id, so deleting
    it is safe even once another build holds the root.
    """
    try:
        if not storage.has_files(target.directory):
            return  # nothing written yet, or a plain run that was published
        if config.versioned and isinstance(error, gates.Refused) and storage.exists(
                posixpath.join(target.directory, tables.MANIFEST_FILE)):
            return  # complete: a valid run even if LATEST does not name it
        storage.delete_trees([target.directory])
    except Exception as e:  # the run's own error matters more; the next run cleans up
        LOG.warning('could not delete %s (the next build will): %s', target.directory, ' '.join(str(e).split())[:300])
