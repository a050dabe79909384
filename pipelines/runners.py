"""Which Beam runner a build runs on: the runners refused up front, and the DirectRunner's own.

`check_runner` refuses, before anything loads, a `--runner` a build cannot
run on. `direct_runner` is the runner of a build without `--runner` or with
`--runner DirectRunner`: Beam's FnApiRunner, built as the DirectRunner
builds it, without the DirectRunner's first attempt on Prism.
"""

from __future__ import annotations

from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

# Runners a build is known to run on, and the same results on each (docs/guarantees.md).
RUNNERS = ('DirectRunner', 'PortableRunner', 'FlinkRunner', 'DataflowRunner')
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
    runner = options.view_as(StandardOptions).runner
    if runner is not None and short_name(runner) not in DIRECT_NAMES:
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # As the DirectRunner does: the workers of --direct_running_mode
    # multi_processing read the pipeline options from the provision info.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))
