"""`--runner FlinkRunner` with no cluster named: a Flink on this machine, started for the build, that spills to disk.

Beam's FlinkRunner without `--flink_master` (Beam's `[auto]`) or with
`[local]` would run the job in a mini cluster inside its job server. That
cannot hold a corpus of users' size: Beam's batch translation runs a whole
partition as one bundle, the job server holds a bundle's outputs (up to 100
messages of up to 10 MB) until it ends, and the mini cluster runs at most
as many partitions as it has slots (it sets the job's default parallelism
to its slots). At 300k chunks, two partitions filled a TaskManager's heap
and the job hung (docs/scale.md). So ragsieve starts a Flink session
cluster of its own instead (`local_flink`: a JobManager and a TaskManager
with a slot per core, from what `make engines` installed), cuts the job
into partitions of a bounded input (`partitions`) that run in waves on the
slots with every exchange blocking (BATCH_FORCED, spilled under $TMPDIR),
gives the job server a small heap and the SDK workers their own processes,
and removes all of it when the build ends. Memory is then bounded by these
settings and the SDK workers' models, not by the corpus.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from apache_beam.options.pipeline_options import FlinkRunnerOptions, JobServerOptions, PipelineOptions

from pipelines.build_index import engine_options

LOG = logging.getLogger('ragsieve.build')

# The Flink masters that mean "no cluster: one on this machine" (Beam's mini cluster's names).
EMBEDDED_MASTERS = ('[local]', '[auto]')
# The Beam Java release whose runner artifacts Maven serves here (engines/fetch.py assembles its job server).
BEAM_JAVA = '2.62.0'
# The Flink that job server was built for.
FLINK_VERSION = '1.19'
# How the local Flink exchanges data between stages, and the input a partition holds at most (`partitions`).
EXECUTION_MODE = 'BATCH_FORCED'
PARTITION_BYTES = 2 << 20
# The job server only translates and submits the job to the local cluster.
JOB_SERVER_HEAP = '512m'
# How long an idle SDK worker is kept: as long as the build. A job of many partitions has stages of Java's alone
# (sorts) for minutes; an SDK worker closed at 30 s idle (runners.ENVIRONMENT_CACHE_MILLIS) was handed to the next
# stage's task as it closed ("call is closed"), which failed the TaskManager at 300k chunks. The cluster, and its
# SDK workers, end with the build.
ENVIRONMENT_CACHE_MILLIS = 24 * 3600 * 1000
# Disk a local Flink build spills per chunk at its peak (every blocking exchange's sorted data, under $TMPDIR):
# 27.2 KB measured at 300k chunks of 48 tokens, 25.3 KB at 1M (benchmarks/scale.py), rounded up.
SPILL_BYTES_PER_CHUNK = 32 << 10


class EngineNotInstalled(ValueError):
    """The local Flink's job server is not on this machine; the message says what to run."""


def engines_home() -> Path:
    """Where `make engines` puts Beam's job servers: $RAGSIEVE_ENGINES, else the user's cache."""
    if os.environ.get('RAGSIEVE_ENGINES'):
        return Path(os.environ['RAGSIEVE_ENGINES'])
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return Path(cache) / 'ragsieve' / 'engines'


def flink_job_server_jar() -> Path:
    """The Flink job server `make engines` assembled (its launcher jar; its jars under lib/ beside it)."""
    return engines_home() / f'flink-job-server-{BEAM_JAVA}' / 'job-server.jar'


def cores() -> int:
    """The cores this process may run on (its affinity, which a container's cpuset narrows)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def with_local_defaults(options: PipelineOptions) -> PipelineOptions:
    """Gives a local Flink build its job server, Flink version, exchange mode and job server heap, where none
    is named.

    Mutates and returns `options`, as Beam's runners do with their own defaults.

    Raises:
      EngineNotInstalled: If no `--flink_job_server_jar` is given and `make engines` has not run.
    """
    flink = options.view_as(FlinkRunnerOptions)
    if not flink.flink_job_server_jar:
        jar = flink_job_server_jar()
        if not jar.is_file():
            raise EngineNotInstalled(
                f'--runner FlinkRunner runs a Flink on this machine from the job server `make engines` assembles, '
                f'and there is none at {jar}: run `make engines` (Java 17 and Maven), or pass --flink_master')
        flink.flink_job_server_jar = str(jar)
    # Beam's default names its newest Flink, for which no job server is served here; the jar decides anyway.
    if 'flink_version' not in options.get_all_options(drop_default=True):
        flink.flink_version = FLINK_VERSION
    engine = options.view_as(engine_options.EngineRunnerOptions)
    if engine.execution_mode_for_batch is None:
        # Every exchange blocking: each task its own region, so a job of many partitions runs in waves on the
        # slots (PIPELINED would need slots for whole chains of them at once).
        engine.execution_mode_for_batch = EXECUTION_MODE
    server = options.view_as(JobServerOptions)
    if not any(p.startswith('-Xmx') for p in server.job_server_jvm_properties or []):
        server.job_server_jvm_properties = [*(server.job_server_jvm_properties or []), f'-Xmx{JOB_SERVER_HEAP}']
    return options


def partitions(input_bytes: int) -> int:
    """The parallelism of a local Flink build of `input_bytes`: a partition per PARTITION_BYTES, one per core
    at least. A partition is one bundle whose outputs the job server holds until it ends: bounded by its input."""
    return max(cores(), -(-input_bytes // PARTITION_BYTES))


def with_input_size(options: PipelineOptions, input_bytes: int) -> PipelineOptions:
    """Sets a local Flink build's `--parallelism` from its input's size (`partitions`), unless one is given.

    Mutates and returns `options`.
    """
    flink = options.view_as(FlinkRunnerOptions)
    if flink.parallelism is None or flink.parallelism < 1:
        flink.parallelism = partitions(input_bytes)
    return options


@dataclasses.dataclass(frozen=True)
class SpillEstimate:
    """The disk a local Flink build spills at its peak, estimated, and what the spill directory's disk has free.

    Attributes:
      chunks: Chunks the input makes at least, about (`direct_memory.chunks_estimate` of full chunks).
      spill_bytes: Bytes spilled at the peak.
      directory: Where it spills ($TMPDIR).
      free_bytes: Free bytes on that directory's file system.
    """

    chunks: int
    spill_bytes: int
    directory: str
    free_bytes: int

    @property
    def fits(self) -> bool:
        return self.spill_bytes <= self.free_bytes


def spill_estimate(chunks: int, directory: Optional[str] = None) -> SpillEstimate:
    """What a local Flink build of about `chunks` chunks spills under `directory` (default: $TMPDIR)."""
    directory = directory or tempfile.gettempdir()
    return SpillEstimate(chunks, chunks * SPILL_BYTES_PER_CHUNK, directory, shutil.disk_usage(directory).free)


def spill_refusal(estimate: SpillEstimate, input_bytes_text: str) -> str:
    """The one line a local Flink build that would fill its disk stops with."""
    return (f'--input holds {input_bytes_text}: at least about {estimate.chunks:,} chunks, which the local Flink '
            f'would spill to disk, about {estimate.spill_bytes / (1 << 30):.1f} GiB at its peak, and '
            f'{estimate.directory} has {estimate.free_bytes / (1 << 30):.1f} GiB free; point TMPDIR at a larger disk, '
            'or pass --memory_check off to try anyway')


@contextlib.contextmanager
def running(options: PipelineOptions) -> Iterator[Path]:
    """While a local Flink build runs: its cluster (`--flink_master` names it), logs and spill directory.

    Call it for a local Flink build only (`runners.is_local_flink`). The
    cluster is stopped and its directory, spilled data included, removed
    when the job ends, whatever the way; its daemons die with this process.
    Yields the cluster's directory.

    Raises:
      local_flink.ClusterFailed: If the cluster does not come up, naming the daemon's log.
    """
    from pipelines.build_index import local_flink

    flink = options.view_as(FlinkRunnerOptions)
    work = Path(tempfile.mkdtemp(prefix='ragsieve-flink-'))
    logs = work.with_name(work.name + '-logs')
    master = flink.flink_master
    try:
        jars = sorted((Path(flink.flink_job_server_jar).parent / 'lib').glob('*.jar'))
        with local_flink.SessionCluster(work, logs, jars, cores()) as cluster:
            flink.flink_master = cluster.master
            yield work
    except BaseException:
        LOG.warning('the local Flink\'s logs are kept in %s', logs)
        raise
    else:
        shutil.rmtree(logs, ignore_errors=True)
    finally:
        flink.flink_master = master
        shutil.rmtree(work, ignore_errors=True)
