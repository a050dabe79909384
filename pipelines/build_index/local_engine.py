"""`--runner FlinkRunner` with no cluster named: an embedded Flink on this machine that spills to disk.

Beam's FlinkRunner without `--flink_master` (Beam's `[auto]`) or with
`[local]` runs the job in a Flink mini cluster inside its job server's JVM.
ragsieve makes that the runner for a corpus the DirectRunner cannot hold:
the job server `make engines` assembled (no download), one task slot per
core, SDK workers as processes of this installation (not LOOPBACK threads
of the launcher), a bounded JVM heap and a Flink configuration whose sorts
and exchanges spill to a directory under $TMPDIR that the build removes.
Memory is then bounded by these settings and the SDK workers' models, not
by the corpus (docs/scale.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional

import yaml
from apache_beam.options.pipeline_options import FlinkRunnerOptions, JobServerOptions, PipelineOptions

from pipelines.build_index import engine_options

# The Flink masters that mean "a mini cluster in the job server" to Beam's FlinkRunner.
EMBEDDED_MASTERS = ('[local]', '[auto]')
# The Beam Java release whose runner artifacts Maven serves here (engines/fetch.py assembles its job server).
BEAM_JAVA = '2.62.0'
# The Flink that job server was built for.
FLINK_VERSION = '1.19'
# The job server's heap: Flink's runtime, the job's plan and the records in flight between operators. Measured at
# 100k and 1M chunks (docs/scale.md); without a cap the JVM took a quarter of the machine and grew with the input.
JVM_HEAP = '1g'
# Flink's managed memory (its sort buffers; what does not fit spills to disk) and network buffers (Beam's batch
# plans have ~140 operators and many exchanges; Flink's local default of 64 MB is enough for 2 slots).
MANAGED_MEMORY = '256m'
NETWORK_MEMORY = '128m'


class EngineNotInstalled(ValueError):
    """The embedded Flink's job server is not on this machine; the message says what to run."""


def engines_home() -> Path:
    """Where `make engines` puts Beam's job servers: $RAGSIEVE_ENGINES, else the user's cache."""
    if os.environ.get('RAGSIEVE_ENGINES'):
        return Path(os.environ['RAGSIEVE_ENGINES'])
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return Path(cache) / 'ragsieve' / 'engines'


def flink_job_server_jar() -> Path:
    """The Flink job server `make engines` assembled (its launcher jar)."""
    return engines_home() / f'flink-job-server-{BEAM_JAVA}' / 'job-server.jar'


def cores() -> int:
    """The cores this process may run on (its affinity, which a container's cpuset narrows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def with_local_defaults(options: PipelineOptions) -> PipelineOptions:
    """Gives an embedded Flink build its job server, Flink version, parallelism and heap, where none is named.

    Mutates and returns `options`, as Beam's runners do with their own defaults.

    Raises:
      EngineNotInstalled: If no `--flink_job_server_jar` is given and `make engines` has not run.
    """
    flink = options.view_as(FlinkRunnerOptions)
    if not flink.flink_job_server_jar:
        jar = flink_job_server_jar()
        if not jar.is_file():
            raise EngineNotInstalled(
                f'--runner FlinkRunner runs an embedded Flink from the job server `make engines` assembles, and '
                f'there is none at {jar}: run `make engines` (Java 17 and Maven), or pass --flink_job_server_jar')
        flink.flink_job_server_jar = str(jar)
    # Beam's default names its newest Flink, for which no job server is served here; the jar decides anyway.
    if 'flink_version' not in options.get_all_options(drop_default=True):
        flink.flink_version = FLINK_VERSION
    if flink.parallelism is None or flink.parallelism < 1:
        flink.parallelism = cores()
    server = options.view_as(JobServerOptions)
    if not any(p.startswith('-Xmx') for p in server.job_server_jvm_properties or []):
        server.job_server_jvm_properties = [*(server.job_server_jvm_properties or []), f'-Xmx{JVM_HEAP}']
    return options


def flink_config(parallelism: int, spill: str) -> dict:
    """The embedded Flink's config.yaml: slots for the parallelism, bounded memory, spills under `spill`."""
    return {
        'taskmanager.numberOfTaskSlots': parallelism,
        'parallelism.default': parallelism,
        'taskmanager.memory.managed.size': MANAGED_MEMORY,
        'taskmanager.memory.network.min': NETWORK_MEMORY,
        'taskmanager.memory.network.max': NETWORK_MEMORY,
        'io.tmp.dirs': spill,
        # A failed task fails the build at once: on one machine a restart meets the same cause.
        'restart-strategy.type': 'none',
    }


@contextlib.contextmanager
def running(options: PipelineOptions) -> Iterator[Optional[str]]:
    """While an embedded Flink build runs: its configuration and spill directory; yields the directory.

    Call it for an embedded Flink build only (`runners.is_local_flink`);
    where `--flink_conf_dir` names a configuration of the user's, nothing
    is written (yields None). The directory, spilled data included, is
    removed when the job ends, whatever the way.
    """
    engine = options.view_as(engine_options.EngineRunnerOptions)
    if engine.flink_conf_dir:
        yield None
        return
    work = tempfile.mkdtemp(prefix='ragsieve-flink-')
    try:
        spill = os.path.join(work, 'spill')
        os.makedirs(spill)
        parallelism = options.view_as(FlinkRunnerOptions).parallelism
        with open(os.path.join(work, 'config.yaml'), 'w') as f:
            yaml.safe_dump(flink_config(parallelism, spill), f, sort_keys=True)
        engine.flink_conf_dir = work
        yield work
    finally:
        engine.flink_conf_dir = None
        shutil.rmtree(work, ignore_errors=True)
