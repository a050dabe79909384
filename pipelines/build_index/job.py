"""Build job: documents -> chunks -> embeddings -> Parquet tables and a FAISS index; `run` launches and publishes it.

`run` reads the flags, locks and picks the run's directory (target.py),
loads and checks the models (checks.py), runs the stages (pipeline.py) on
the runner the flags name, then writes the manifest, checks the gates and
publishes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import posixpath
import time
from typing import NamedTuple, Optional, Sequence

from pipelines.common import third_party

with third_party.quiet_imports():  # `python -m pipelines.build_index` imports Beam here, before the command line does
    import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.build_index import dataflow_job, direct_memory, engine_job, engine_services, job_server, local_engine
from pipelines.build_index import orphans, placement, runners
from pipelines.build_index import gates as build_gates
from pipelines.build_index import progress as build_progress
from pipelines.build_index.checks import check_model, check_ner, check_precision
from pipelines.build_index.command_line import parse_args
from pipelines.build_index.manifest import (
    DIFF_FILE,
    Target,
    change_report,
    job_counters,
    log_filters,
    make_manifest,
    summary,
)
from pipelines.build_index.options import ON_OFF, BuildConfig, BuildIndexOptions
from pipelines.build_index.pipeline import build_pipeline
from pipelines.build_index.target import build_locks, check_paths, discard, prepare_target
from pipelines.common import heap, progress, progress_meters
from pipelines.common.exits import say
from transforms import storage
from transforms.features import cache as feature_cache
from transforms.features.cache_settings import cache_specs
from transforms.features import precision as precisions
from transforms.features.embedding import SharedModel
from transforms.ingest.listing import input_size
from transforms.lineage import lossless
from transforms.output import changes, digests, publish, snapshots, tables

LOG = logging.getLogger('ragsieve.build')


def run(argv: Optional[Sequence[str]] = None) -> dict:
    """Runs the build job and publishes its output; returns the manifest.

    A versioned run writes `runs/<run_id>/`, manifest.json last, then commits
    its cache generation, points LATEST at it and prunes old runs; a plain
    run writes a staging directory and renames it over --output. Either way a
    run killed before the end leaves the published index as it was, and a
    run that fails deletes what it wrote. The output's lock is taken before
    anything is loaded, so a second build to the same output fails at once.

    Raises:
      ValueError: For bad settings or paths, a locked output, or a build in
        which every record was rejected (unless --allow_empty).
    """
    logging.basicConfig(format='%(levelname)s %(name)s: %(message)s')
    LOG.setLevel(logging.INFO)
    with contextlib.ExitStack() as stack:
        stack.callback(heap.release)  # what the launcher loaded, frozen for the run
        with heap.loading():  # torch's import, by --device's check
            options = parse_args(argv)
            storage.configure(options)  # before the input is listed: S3's endpoint and keys, GCP's project
            flags = options.view_as(BuildIndexOptions)
            config = BuildConfig.from_options(flags)
        # Closed before the summary is printed, and on any failure.
        view = stack.enter_context(progress.View(flags.progress, flags.progress_interval, LOG))
        engine_job.check_stall_timeout(flags.engine_stall_timeout)
        engine_job.check_reachable(options)  # before the locks and the models: a wrong master fails at once
        paths = {'--input': config.input, '--output': config.output, '--cache': config.cache}
        runners.check_paths_reach_workers(options, paths)
        placement.check(options, paths)  # before the input is listed: a launcher-only setting fails at once
        direct = runners.is_direct(options) and ON_OFF[flags.memory_check]
        local_flink = runners.is_local_flink(options)
        config, files, size = list_input(config, view, need_size=direct or local_flink)
        if direct:  # before anything loads: a corpus the DirectRunner cannot hold is said, not left to the OOM killer
            check_direct_memory(options, config, files, size)
        if local_flink:
            local_engine.with_input_size(options, size)
            if ON_OFF[flags.memory_check]:  # a full disk would fail the job hours in
                check_spill_room(config, size)
        if dataflow_job.dry_run(options):
            return translate_job(config, options)
        check_paths(config)
        # Taking over a killed build's lease cancels the engine job it left running, before its leftovers go.
        held = [stack.enter_context(snapshots.lock_file(root, path, config.lease_seconds, orphans.cancel))
                for path, root in build_locks(config)]
        target, debris = prepare_target(config)
        if not config.versioned:  # held while it fills: a build whose lock file was deleted is still seen
            stack.enter_context(snapshots.hold_staging(target.directory))
        if debris:
            LOG.info('Deleted %d leftovers of killed runs: %s', len(debris), ', '.join(debris))
        try:
            manifest = build_and_publish(config, options, target, view, files, held)
        except BaseException as e:
            discard(config, target, e)
            raise
    say(summary(manifest, config, target))  # published: printing it cannot change that
    if config.sync:
        from pipelines import sync

        # After publishing: a store that cannot be written leaves the index published, and says so (exit 4).
        with progress.View(flags.progress, flags.progress_interval, LOG) as view:
            report = sync.sync_published(config.output, config.sync, manifest['run_id'], view)
        say(report.line())
    return manifest


def translate_job(config: BuildConfig, options: PipelineOptions) -> dict:
    """`--runner DataflowRunner --dry_run=true`: translates the job, prints what it holds; returns that.

    Nothing is locked, written or published: the output is only named in the job.
    """
    with heap.loading():
        models = load_models(config)
    description = dataflow_job.translate(config, options, build_pipeline, models.dim, models.handle)
    print(dataflow_job.summary(description))
    return {'dry_run': description}


def list_input(config: BuildConfig, view: progress.View,
               need_size: bool = False) -> tuple[BuildConfig, Optional[int], Optional[int]]:
    """Lists --input (metadata only, nothing is read), a step of the view: its files and bytes.

    Returns:
      The config with `--num_shards 0` resolved (`with_shards`), and the
      files and bytes listed (None when neither the view, the shards nor
      the caller needed them).
    """
    if config.num_shards and not view.enabled and not need_size:
        return config, None, None
    with view.step('list input') as step:
        files, size = input_size(config.input)
        step.detail = f'{files:,} files, {progress_meters.size(size)}'
    return with_shards(config, size), files, size


def check_direct_memory(options: PipelineOptions, config: BuildConfig, files: int, size: int) -> None:
    """Refuses, in one line, an input the DirectRunner would not hold in this machine's memory (`direct_memory`).

    Raises:
      ValueError: Naming the estimate, the machine's memory and `--runner FlinkRunner`.
    """
    from apache_beam.options.pipeline_options import DirectOptions

    multi = options.view_as(DirectOptions).direct_running_mode == 'multi_processing'
    estimate = direct_memory.estimate(size, config.chunker.chunk_size, config.chunker.chunk_overlap,
                                      'multi_processing' if multi else 'in_memory')
    if not estimate.fits:
        raise ValueError(direct_memory.refusal(estimate, size, files))
    LOG.info('memory: about %.1f GiB of %.1f GiB at the peak, estimated from the input\'s %s (--memory_check)',
             estimate.peak_bytes / direct_memory.GIB, estimate.machine_bytes / direct_memory.GIB,
             progress_meters.size(size))


def check_spill_room(config: BuildConfig, size: int) -> None:
    """Refuses, in one line, an input a local Flink build would spill more of than $TMPDIR's disk has free.

    Raises:
      ValueError: Naming the estimate, the free space and TMPDIR.
    """
    # Full chunks, the fewest the input can make: the local Flink is the way out of memory, refused only where
    # its disk cannot be enough.
    chunks = direct_memory.chunks_estimate(size, config.chunker.chunk_size, config.chunker.chunk_overlap, fill=1.0)
    estimate = local_engine.spill_estimate(chunks)
    if not estimate.fits:
        raise ValueError(local_engine.spill_refusal(estimate, progress_meters.size(size)))
    LOG.info('disk: about %.1f GiB spilled at the peak of %.1f GiB free in %s, estimated from the input\'s %s '
             '(--memory_check)', estimate.spill_bytes / direct_memory.GIB, estimate.free_bytes / direct_memory.GIB,
             estimate.directory, progress_meters.size(size))


def with_shards(config: BuildConfig, input_bytes: int) -> BuildConfig:
    """The config with `--num_shards 0` resolved: one part per 2 MiB of input files, at most 1024.

    Sizing is the launcher's work, from the input's listing, not the config's.
    """
    if config.num_shards:
        return config
    return dataclasses.replace(config, num_shards=tables.default_num_shards(input_bytes))


class Models(NamedTuple):
    """What the launcher loaded, once, before the pipeline: `model` is held until the run ends."""

    handle: SharedModel
    model: object
    dim: int
    max_seq_length: int
    ner_meta: Optional[dict]


def load_models(config: BuildConfig, step=progress.no_step) -> Models:
    """Loads and checks the embedding model, and spaCy's when a filter needs entities.

    Args:
      config: The build's settings.
      step: `View.step`, to show each phase of the loads.
    """
    handle = SharedModel.of(config.embedding)
    # Held until the run ends: the DirectRunner's in-process workers then share it.
    model = handle.acquire(step)
    dim, max_seq_length = check_model(config, model)
    config.index.check(dim)
    ner_meta = None
    if config.filters.needs_entities:
        with step('load spaCy model', config.filters.features.spacy_model):
            ner_meta = check_ner(config.filters)
    return Models(handle, model, dim, max_seq_length, ner_meta)


def build_and_publish(config: BuildConfig, options: PipelineOptions, target: Target, view: progress.View,
                      files: Optional[int], locks: Sequence = ()) -> dict:
    """Loads the models, runs the pipeline into `target` and publishes it; returns the manifest."""
    with heap.loading():
        models = load_models(config, view.step)
    return run_and_publish(config, options, target, models, view, files, locks)


def run_and_publish(config: BuildConfig, options: PipelineOptions, target: Target, models: Models,
                    view: progress.View, files: Optional[int], locks: Sequence = ()) -> dict:
    """Runs the pipeline into `target` with the loaded models and publishes it; returns the manifest.

    Args:
      config: The build's settings.
      options: Its pipeline options.
      target: The run's directory.
      models: What `load_models` loaded.
      view: Where the steps and the workers' counts show.
      files: The files --input lists (the read meter's total).
      locks: The locks the run holds (an object store's leases, local lock files), checked before it
        commits or publishes anything.
    """
    model, ner_meta = models.model, models.ner_meta
    quality = None
    if config.embedding.backend != precisions.TORCH:
        with view.step(f'check {config.embedding.backend} {config.embedding.precision} against torch fp32'):
            quality = check_precision(config, model)
    cache = None
    if config.cache:
        with view.step('open feature cache', config.cache):
            cached = ['spans', 'embedding'] + [f for f in ('minhash', 'entities') if config.filters.needs(f)]
            specs = cache_specs(cached, config.embedding, model, config.filters.features, config.chunker, ner_meta)
            cache = feature_cache.CacheRun.open(config.cache, specs, target.run_id, config.num_shards)
    try:
        manifest = run_and_commit(config, options, target, models, view, files, cache, quality, locks)
    except BaseException:
        if cache:
            cache.discard()
        raise
    # The canary, report.html; a refused run stops here, complete but unpublished (gates.Refused).
    with view.step('check gates, write report'):
        manifest = build_gates.check_and_report(config, target, manifest, model)
    with view.step('publish'):
        publish_run(config, target, locks)
        if cache:
            snapshots.fence_locks(locks)
            cache.prune()
    return manifest


def run_and_commit(config: BuildConfig, options: PipelineOptions, target: Target, models: Models,
                   view: progress.View, files: Optional[int], cache: Optional[feature_cache.CacheRun],
                   quality: Optional[dict], locks: Sequence) -> dict:
    """Runs the pipeline into `target`, writes its manifest and commits its cache generation; returns the manifest."""
    handle, dim = models.handle, models.dim
    publish.checkpoint('before_pipeline')
    started = time.perf_counter()
    engine_job.with_job_name(options, f'{target.run_id}-{os.getpid()}')
    orphans.record(locks, options)  # for the next build to cancel, should this launcher be killed
    third_party.calm_grpc_keepalive()  # the launcher's channels to a job server ping as the SDK workers' do
    # What bounds a job on an engine: the workers' live counts where they reach the view, the engine's own view.
    with build_progress.live_counts(options, view, build_progress.build_meters(config, files)) as live, \
            local_engine.running(options) if runners.is_local_flink(options) else contextlib.nullcontext():
        pipeline = beam.Pipeline(runner=runners.direct_runner(options), options=options)
        build_pipeline(pipeline, config, target.directory, dim, handle, cache)
        try:
            with job_server.submitting(engine_job.job_endpoint(options)):
                result = pipeline.run()
            console = build_progress.dataflow_console(options, result)
            if console:
                view.note(console)
            engine_job.wait(result, options, live, options.get_all_options()['engine_stall_timeout'],
                            silent=lambda: engine_services.silent_line(options),
                            lost=lambda: snapshots.lost_lease(locks))
        except Exception as e:
            # A run paused past its lease finds its files deleted by the build that took over: that is the cause
            # (a job the launcher ended says so itself: the wait asks the leases at each poll).
            if not isinstance(e, engine_job.JobEnded):
                snapshots.check_locks(locks)
            raise
    view.finish(job_counters(result))
    publish.checkpoint('after_pipeline')
    snapshots.check_locks(locks)
    with view.step('write manifest'):
        manifest = write_manifest(config, result, target, cache, models, time.perf_counter() - started, quality)
    if cache:
        # Before the gates: a refused run's features are sound, not the leftovers of a killed run.
        snapshots.fence_locks(locks)  # a run that lost its root to another build commits and publishes nothing
        cache.commit()
        publish.checkpoint('after_cache_commit')
    return manifest


def publish_run(config: BuildConfig, target: Target, locks: Sequence) -> None:
    """Publishes the complete run `target`, fenced (`snapshots.publish_latest`, `fence_locks`), then prunes.

    Raises:
      leases.Lost: If the run lost a lease on its output or cache.
      snapshots.Superseded: If LATEST changed since the run took the root.
    """
    if not config.versioned:
        snapshots.fence_locks(locks)
        publish.publish(target.directory, config.output)
        return
    snapshots.publish_latest(config.output, target.run_id, target.latest_version, locks)
    publish.checkpoint('after_latest')
    snapshots.fence_locks(locks)
    pruned = snapshots.prune_runs(config.output, config.keep_runs, config.prune_grace_seconds)
    if pruned:
        LOG.info('Deleted runs beyond --keep_runs %d: %s', config.keep_runs, ', '.join(pruned))


def write_manifest(config: BuildConfig, result, target: Target, cache, models: Models, wall_seconds: float,
                   quality: Optional[dict]) -> dict:
    """Writes the run's diff.json and, last, its manifest.json; returns the manifest.

    Raises:
      ValueError: For a build in which no document was indexed (`check_not_empty`).
    """
    manifest = make_manifest(config, result, target, cache, models.dim, models.max_seq_length, models.handle.probe,
                             wall_seconds, quality)
    # The audit reached the launcher through this file; the manifest is its one home now.
    storage.delete_files([posixpath.join(target.directory, lossless.AUDIT_FILE)])
    check_not_empty(manifest, config, target.directory)
    log_filters(manifest)
    report = change_report(target, manifest)
    LOG.info(changes.summary_line(report))
    storage.write_json(posixpath.join(target.directory, DIFF_FILE), report)
    manifest.update(digests.recorded(target.directory))  # what readers check the run by
    manifest['gates'] = build_gates.verdict(config, manifest, target)
    # Last file of a run: its presence is what makes the run complete.
    storage.write_json(posixpath.join(target.directory, tables.MANIFEST_FILE), manifest)
    publish.checkpoint('after_manifest')
    return manifest


def check_not_empty(manifest: dict, config: BuildConfig, directory: str) -> None:
    """Refuses to publish a build in which no document was indexed, unless --allow_empty.

    Raises:
      ValueError: With the rejection reasons and a few examples, since the
        rejected/ table is not published either.
    """
    counts = manifest['counts']
    if counts['documents_indexed'] or config.allow_empty:
        return
    reasons = ', '.join(f'{n} {r}' for r, n in counts['rejected_by_reason'].items()) or 'none'
    examples = tables.read_table(posixpath.join(directory, tables.REJECTED_DIR)).slice(0, 3).to_pylist()
    shown = ''.join(f'; e.g. {r["source"]}: {r["reason"]} ({r["detail"]})' for r in examples)
    raise ValueError(
        f'no document was indexed from {counts["files"]} files (rejected: {reasons}{shown}): nothing '
        'was published; pass --allow_empty to publish an empty index')
