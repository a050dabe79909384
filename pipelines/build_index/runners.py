"""Which Beam runner a build runs on: the runners refused up front, the DirectRunner's own, engines' defaults.

`check_runner` refuses, before anything loads, a `--runner` a build cannot
run on. `direct_runner` is the runner of a build without `--runner` or with
`--runner DirectRunner`: Beam's FnApiRunner, built as the DirectRunner
builds it, without the DirectRunner's first attempt on Prism.
`with_engine_defaults` gives a build sent to a Flink or Spark cluster, or
to a job server by `--job_endpoint`, SDK workers without Docker, and a
Flink job its restarts (`engine_options`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Optional

from apache_beam.options.pipeline_options import JobServerOptions, PipelineOptions, PortableOptions, StandardOptions

from pipelines.build_index import engine_options, local_engine, local_flink

LOG = logging.getLogger('ragsieve.build')

# Runners a build is known to run on, and the same results on each (docs/guarantees.md).
RUNNERS = ('DirectRunner', 'PortableRunner', 'FlinkRunner', 'SparkRunner', 'DataflowRunner')
# Beam runners that cannot run a build, and why.
REFUSED_RUNNERS = {
    'dask': "Beam's Dask runner ignores tagged outputs and runs only one branch of a graph, "
            'so a build would lose its rejected and dropped rows',
}
# Beam's DirectRunner by its names (`--runner direct`, `DirectRunner`, dotted paths), lower case, no "runner".
DIRECT_NAMES = ('direct', 'switchingdirect')


def check_runner(runner: Optional[str]) -> None:
    """Refuses, before anything loads, a `--runner` that is no Beam runner or one a build cannot run on.

    Raises:
      ValueError: Saying why, and which runners work.
    """
    if runner is None:
        return  # Beam's default, the DirectRunner
    name = short_name(runner)
    works = ', '.join(RUNNERS)
    if name in REFUSED_RUNNERS:
        raise ValueError(f'--runner {runner}: {REFUSED_RUNNERS[name]}; use one of {works}')
    known = {short_name(n) for n in StandardOptions.KNOWN_RUNNER_NAMES}
    if name not in known and '.' not in runner:
        raise ValueError(f'--runner {runner!r} is not a Beam runner; ragsieve runs on {works}')


def short_name(runner: str) -> str:
    """`DirectRunner`, `direct` and `apache_beam.runners.direct.DirectRunner` all give `direct`."""
    return runner.rsplit('.', 1)[-1].lower().removesuffix('runner')


def default_kernels(runner: Optional[str]) -> Optional[str]:
    """The `--embed_kernels` a build on `runner` gets when none is asked for; None: the precision's own default.

    Dataflow's workers are never the launcher's machine, whose kernel probe
    they must match, and one machine type spans several CPU platforms (N2:
    Cascade Lake and Ice Lake): portable bits are the ones all of them
    compute. Elsewhere the launcher's CPU family is the workers' as a rule
    (the DirectRunner, a cluster of one machine type), and a worker of
    another family stops the build, saying to pass portable.
    """
    from transforms.features import kernels

    return kernels.PORTABLE if runner is not None and short_name(runner) == 'dataflow' else None


def is_direct(options: PipelineOptions) -> bool:
    """Whether the build runs on Beam's DirectRunner: no `--runner`, or one of its names."""
    runner = options.view_as(StandardOptions).runner
    return runner is None or short_name(runner) in DIRECT_NAMES


def direct_runner(options: PipelineOptions):
    """The runner of a DirectRunner build: Beam's FnApiRunner; None for any other `--runner`.

    Beam's DirectRunner first tries its Prism runner on a batch pipeline: it
    translates the whole pipeline and fetches Prism's binary from GitHub.
    Offline the fetch fails and it falls back to this FnApiRunner (~0.4 s of
    every build spent); online it runs the build on Prism, which none of
    ragsieve's tests and guarantees cover (docs/guarantees.md). Prism stays
    available as `--runner PrismRunner`. With any other `--runner`, Beam
    builds the runner named.
    """
    if not is_direct(options):
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # As the DirectRunner does: the workers of --direct_running_mode
    # multi_processing read the pipeline options from the provision info.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


# Runners that send the job to an engine's cluster through a job server (short names).
ENGINE_NAMES = ('flink', 'spark')
# Job endpoints that are no job server of a cluster: Beam runs the job in this process.
EMBEDDED_ENDPOINTS = ('embed',)
# How long an engine keeps an idle SDK worker for the job's next stage (Beam's default, 0, restarts it,
# and reloads its models, at every stage; measured on Flink: one SDK worker per TaskManager instead of 11).
# A job the engine restarts sooner gets the cached workers back, a killed one included, and fails again:
# keep the engine's restart delay above it (engines/flink.py: 45 s).
ENVIRONMENT_CACHE_MILLIS = 30_000
# The SDK worker boot this installation provides for PROCESS environments (pipelines/build_index/sdk_worker.py).
SDK_WORKER = 'ragsieve-sdk-worker'
# The java the job server Beam starts for a build runs under: killed with the build (`job_server_java`).
JOB_SERVER_JAVA = 'ragsieve-java'
# The Spark property of the driver's web UI port, whose REST API shows the job (`with_spark_ui_port`).
SPARK_UI_PORT = 'spark.ui.port'


def engine_name(options: PipelineOptions) -> Optional[str]:
    """'flink' or 'spark' for a build sent to that engine's cluster, 'portable' for one sent to a job server.

    `--runner PortableRunner --job_endpoint HOST:PORT` names a job server
    already running (a shared Flink or Spark job server); None for any
    other runner, and for `--job_endpoint embed` (Beam's job service in
    this process).
    """
    runner = options.view_as(StandardOptions).runner
    name = short_name(runner) if runner is not None else None
    if name in ENGINE_NAMES:
        return name
    endpoint = options.view_as(PortableOptions).job_endpoint
    if name == 'portable' and endpoint and endpoint not in EMBEDDED_ENDPOINTS:
        return name
    return None


def is_local_flink(options: PipelineOptions) -> bool:
    """Whether the build runs on Beam's FlinkRunner with no cluster named: ragsieve starts one on this machine."""
    return (engine_name(options) == 'flink'
            and options.get_all_options().get('flink_master') in local_engine.EMBEDDED_MASTERS)


def with_engine_defaults(options: PipelineOptions) -> PipelineOptions:
    """Gives a build sent to a cluster SDK workers that need no Docker, kept across stages; a Flink job restarts.

    Beam's default environment for them is DOCKER, with an SDK image that has
    neither ragsieve nor its models. Without `--environment_type`, each
    TaskManager or executor starts its SDK workers as processes of this
    installation (`ragsieve-sdk-worker`, a PROCESS environment): right on
    one machine or on hosts sharing the install; pass `--environment_type
    DOCKER --sdk_container_image ...` for others. The same for
    `--runner PortableRunner --job_endpoint ...`, a job server already
    running (`engine_name`). Without `--environment_cache_millis`, an idle
    SDK worker waits `ENVIRONMENT_CACHE_MILLIS` for the next stage (where
    Beam's runner classes load with the engine's, docs/operations.md). A
    Flink job, or one sent to a job server, asks for restarts
    (`engine_options.with_restart_defaults`); a Flink on this machine (no
    `--flink_master`) gets the job server `make engines` assembled and its
    exchange mode (`local_engine.with_local_defaults`), and PROCESS workers
    too (Beam's default there: LOOPBACK threads of the launcher). Mutates
    and returns `options`, as Beam's runners do with their own defaults.

    Raises:
      ValueError: If this installation has no `ragsieve-sdk-worker`, for
        restarts below -1, or for a Flink on this machine whose job server
        `make engines` has not assembled.
    """
    runner = options.view_as(StandardOptions).runner
    portable = options.view_as(PortableOptions)
    engine = engine_name(options)
    if engine is None:
        return options
    local = is_local_flink(options)
    if not int(portable.environment_cache_millis or 0):
        # Keeps each worker's SDK workers, and the models they loaded, from one stage to the next.
        portable.environment_cache_millis = (local_engine.ENVIRONMENT_CACHE_MILLIS if local
                                             else ENVIRONMENT_CACHE_MILLIS)
    if engine in ('flink', 'portable'):  # a shared job server is Flink's as a rule; Spark's ignores the flags
        engine_options.with_restart_defaults(options)
    with_job_server_dying_with_the_build(options)
    with_spark_ui_port(options)
    if local:
        local_engine.with_local_defaults(options)
    if portable.environment_type:
        return options
    command = os.path.join(os.path.dirname(sys.executable), SDK_WORKER)
    if not os.access(command, os.X_OK):
        raise ValueError(f'--runner {runner}: no {command} to start SDK workers with; reinstall ragsieve '
                         '(pip install -e .) or pass --environment_type and --environment_config')
    portable.environment_type = 'PROCESS'
    portable.environment_config = json.dumps({'command': command})
    LOG.info('--runner %s: SDK workers are processes of this installation (%s); pass --environment_type '
             'to change that', runner, command)
    return options


def with_job_server_dying_with_the_build(options: PipelineOptions) -> PipelineOptions:
    """Starts the job server Beam's FlinkRunner or SparkRunner starts for the build under `ragsieve-java`, which
    the kernel kills with the build however it dies (`job_server_java`), unless `--job_server_java_launcher`
    names another java. A PortableRunner build starts no job server. Mutates and returns `options`."""
    server = options.view_as(JobServerOptions)
    command = os.path.join(os.path.dirname(sys.executable), JOB_SERVER_JAVA)
    if (short_name(options.view_as(StandardOptions).runner or '') in ('flink', 'spark')
            and server.job_server_java_launcher == 'java' and os.access(command, os.X_OK)):
        server.job_server_java_launcher = command
    return options


def with_spark_ui_port(options: PipelineOptions) -> PipelineOptions:
    """Gives the web UI of a SparkRunner build's driver (the job server Beam starts on this machine) a free port
    of its own, unless `--job_server_jvm_properties` names one: the build reads Spark's view of its job there
    (`spark_rest_api`), and 4040, Spark's default, may be another driver's. Mutates and returns `options`."""
    server = options.view_as(JobServerOptions)
    properties = server.job_server_jvm_properties or []
    if (short_name(options.view_as(StandardOptions).runner or '') == 'spark'
            and spark_ui_port(options) is None):
        server.job_server_jvm_properties = [*properties, f'-D{SPARK_UI_PORT}={local_flink.free_port()}']
    return options


def spark_ui_port(options: PipelineOptions) -> Optional[int]:
    """The port `--job_server_jvm_properties` gives a SparkRunner driver's web UI (`-Dspark.ui.port=N`); None
    where it gives none."""
    for prop in options.view_as(JobServerOptions).job_server_jvm_properties or []:
        key, _, value = prop.partition('=')
        if key == f'-D{SPARK_UI_PORT}' and value.isdigit():
            return int(value)
    return None


def with_worker_env(options: PipelineOptions, env: dict) -> PipelineOptions:
    """Adds `env` to the environment of PROCESS SDK workers (the "env" of `--environment_config`).

    Workers of the DirectRunner and LOOPBACK ones inherit the launcher's
    environment, DOCKER and EXTERNAL ones have their own: their options are
    left as they are. Mutates and returns `options`.
    """
    portable = options.view_as(PortableOptions)
    if (portable.environment_type or '').upper() != 'PROCESS' or not portable.environment_config:
        return options
    try:
        config = json.loads(portable.environment_config)
    except ValueError:
        return options  # not the JSON form: Beam reports it when it reads it
    config['env'] = {**(config.get('env') or {}), **env}
    portable.environment_config = json.dumps(config)
    return options


def check_paths_reach_workers(options: PipelineOptions, paths: dict) -> None:
    """Refuses relative local paths for a build whose workers run elsewhere than the launcher.

    An engine's SDK workers resolve a relative path in their own directory
    (the TaskManager's, the executor's), so `--input docs` would read, or
    write, another folder than the launcher's; Dataflow's workers have no
    local path of the launcher at all.

    Args:
      options: The build's pipeline options.
      paths: `{flag: path}` of the paths workers read or write (None: not given).

    Raises:
      ValueError: Naming the flag and the absolute path to pass instead.
    """
    runner = options.view_as(StandardOptions).runner
    if engine_name(options) is None and (runner is None or short_name(runner) != 'dataflow'):
        return
    if is_local_flink(options):
        return  # the local Flink's daemons, and the SDK workers they start, run in this directory
    for flag, path in paths.items():
        if path and '://' not in path and not os.path.isabs(path):
            raise ValueError(f'{flag} {path}: a relative path, which the {runner} workers would resolve in their '
                             f'own directory: pass {os.path.abspath(path)}')
