"""The engines' own per-job flags (Beam's Java Flink and Spark runner options) and the restarts a Flink job asks for.

Beam's Python SDK declares only some of its Flink and Spark runner options
(`--flink_master`, `--parallelism`, ...); the rest (`--number_of_execution_retries`,
`--checkpointing_interval`, `--storage_level`, ...) belong to the Java job
server, which Beam's runner asks for them only while it submits, so
`command_line` would refuse them as unknown flags. `add_flags` declares
them: the build accepts them, and Beam sends them to the job server with
the job's other options (`beam:option:NAME:v1`). `with_restart_defaults`
gives a Flink job `RESTART_ATTEMPTS` restarts `RESTART_DELAY_MS` apart
unless the build names its own.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions

# A lost TaskManager host fails the job 3 to 4 times over (measured on a cluster of five hosts: each failed region
# of the job uses a restart, and the lost host's results are read by several): 10 restarts survive two lost hosts
# in one build; 2 (the documented cluster setting before) failed after one, even with the TaskManager back.
RESTART_ATTEMPTS = 10
# Longer than an idle SDK worker is kept (runners.ENVIRONMENT_CACHE_MILLIS, 30 s): a job restarted sooner gets a
# dead SDK worker back from that cache and fails again (measured). Longer cache, longer delay: see `restart_delay_ms`.
RESTART_DELAY_MARGIN_MS = 15_000

# Beam's Java FlinkPipelineOptions (job servers 2.62 to 2.77) that act on a job: name -> (type, choices, help).
FLINK_FLAGS = {
    'number_of_execution_retries': (
        int, None, f'Restarts of a failed Flink job (-1: the cluster\'s own restart-strategy, 0: none); default '
                   f'{RESTART_ATTEMPTS} on Flink: a lost TaskManager host fails a job 3 to 4 times. Beam\'s Java '
                   'runner applies it to streaming jobs; a batch build\'s restarts are the cluster\'s '
                   'restart-strategy (docs/operations.md).'),
    'execution_retry_delay': (
        int, None, 'Milliseconds between restarts of a failed Flink job (-1: the cluster\'s); default '
                   '--environment_cache_millis + 15000 (45000): a job restarted sooner gets a dead SDK worker back.'),
    'checkpointing_interval': (int, None, 'Milliseconds between a Flink streaming job\'s checkpoints (Beam\'s '
                                          'FlinkRunner option; a batch build takes none).'),
    'checkpointing_mode': (str, ('EXACTLY_ONCE', 'AT_LEAST_ONCE'), 'Flink checkpoints\' guarantee.'),
    'checkpoint_timeout_millis': (int, None, 'Milliseconds a Flink checkpoint may take.'),
    'min_pause_between_checkpoints': (int, None, 'Milliseconds between the end of one Flink checkpoint and the '
                                                 'next.'),
    'num_concurrent_checkpoints': (int, None, 'Flink checkpoints in flight at once.'),
    'execution_mode_for_batch': (str, ('PIPELINED', 'PIPELINED_FORCED', 'BATCH', 'BATCH_FORCED'),
                                 'How a Flink batch job exchanges data between stages (Beam\'s default PIPELINED).'),
    'max_bundle_size': (int, None, 'Elements in a bundle on Flink, at most.'),
    'max_bundle_time_mills': (int, None, 'Milliseconds a bundle stays open on Flink, at most.'),
    'latency_tracking_interval': (int, None, 'Milliseconds between Flink\'s latency markers (0: none).'),
    'flink_conf_dir': (str, None, 'The Flink configuration directory the job server reads (on the job server\'s '
                                  'machine).'),
}
# Beam's Java SparkPipelineOptions that act on a job. Spark retries a failed task by its own setting
# (spark.task.maxFailures, the cluster's); Beam has no per-job flag for it.
SPARK_FLAGS = {
    'storage_level': (str, None, 'Spark storage level of the datasets Beam caches (Beam\'s default MEMORY_ONLY).'),
    'bundle_size': (int, None, 'Bytes of a bounded source\'s bundle on Spark (0: Spark\'s default parallelism).'),
    'batch_interval_millis': (int, None, 'Milliseconds of a Spark streaming micro-batch.'),
    'checkpoint_dir': (str, None, 'Where a Spark streaming job checkpoints.'),
    'checkpoint_duration_millis': (int, None, 'Milliseconds between a Spark streaming job\'s checkpoints.'),
}


def add_flags(parser) -> None:
    """Adds the Flink and Spark job servers' flags to an argparse parser (or a Beam options parser).

    None is the default of each, so a flag not given is not sent and the
    job server keeps its own default.
    """
    for name, (kind, choices, meaning) in {**FLINK_FLAGS, **SPARK_FLAGS}.items():
        parser.add_argument(f'--{name}', type=kind, default=None, choices=choices, help=meaning)


class EngineRunnerOptions(PipelineOptions):
    """The Flink and Spark job servers' per-job flags (`FLINK_FLAGS`, `SPARK_FLAGS`)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add_flags(parser)


def restart_delay_ms(options: PipelineOptions) -> int:
    """The default delay between restarts: longer than an idle SDK worker is kept (`--environment_cache_millis`)."""
    cache = int(options.view_as(PortableOptions).environment_cache_millis or 0)
    return cache + RESTART_DELAY_MARGIN_MS


def with_restart_defaults(options: PipelineOptions) -> PipelineOptions:
    """Gives a Flink job `RESTART_ATTEMPTS` restarts, `restart_delay_ms` apart, where the build names none.

    Call it after the environment's defaults (`runners.with_engine_defaults`),
    whose `--environment_cache_millis` the delay exceeds. Mutates and
    returns `options`, as Beam's runners do with their own defaults.

    Raises:
      ValueError: For a number of restarts or a delay below -1.
    """
    engine = options.view_as(EngineRunnerOptions)
    for flag in ('number_of_execution_retries', 'execution_retry_delay'):
        value = getattr(engine, flag)
        if value is not None and value < -1:
            raise ValueError(f'--{flag} must be -1 (the cluster\'s setting), 0 or more, got {value}')
    if engine.number_of_execution_retries is None:
        engine.number_of_execution_retries = RESTART_ATTEMPTS
    if engine.execution_retry_delay is None:
        engine.execution_retry_delay = restart_delay_ms(options)
    return options
