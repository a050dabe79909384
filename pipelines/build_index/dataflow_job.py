"""A build's Dataflow job, translated offline (`--runner DataflowRunner --dry_run=true`): nothing submitted.

Beam's DataflowRunner with `--dry_run` translates the pipeline as for a
submission (the Runner API pipeline Dataflow's Runner v2 executes, its SDK
container image, the files staged for its workers) and returns before it
stages anything or calls the service. This module builds a real build's
pipeline that way and describes the job: its stages, what its workers run
and what they receive, so a deployment can be checked without a project.
"""

from __future__ import annotations

import json
import tarfile
from typing import Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DebugOptions, PipelineOptions, SetupOptions, StandardOptions, TestOptions)
from apache_beam.portability.api import beam_runner_api_pb2
from google.protobuf import json_format

from pipelines.build_index import runners
from transforms import storage

# How workers get a Python package: the sdist Beam builds from --setup_file is staged under this name.
SETUP_FILE_ARTIFACT = 'workflow.tar.gz'


def translate(config, options: PipelineOptions, build_pipeline, dim: int, model) -> dict:
    """Translates the build for Dataflow without submitting it; returns the job's description.

    Args:
      config: The build's settings.
      options: Its pipeline options (DataflowRunner, --dry_run).
      build_pipeline: `pipeline.build_pipeline`.
      dim: The embedding dimension.
      model: The model handle the build's stages carry.

    Returns:
      `describe(job)`; also written as JSON to `--dataflow_job_file`, with
      the Runner API pipeline, when that flag is given.
    """
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, config, config.output, dim, model)
    job = pipeline.run().job
    description = describe(job.proto_pipeline, job.options, job.proto.name)
    path = options.view_as(DebugOptions).dataflow_job_file
    if path:
        written = dict(description, pipeline=json_format.MessageToDict(job.proto_pipeline))
        storage.write_atomic(path, json.dumps(written, indent=1, sort_keys=True).encode('utf-8'))
    return description


def describe(pipeline: beam_runner_api_pb2.Pipeline, options: PipelineOptions, name: str) -> dict:
    """What a translated job holds: its stages and every SDK environment's image and staged files."""
    transforms = pipeline.components.transforms
    environments = []
    for env_id, env in sorted(pipeline.components.environments.items()):
        image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image if env.payload else None
        environments.append({'id': env_id, 'urn': env.urn, 'image': image,
                             'artifacts': [artifact(d) for d in env.dependencies]})
    return {
        'job_name': name,
        # The build's labelled steps (ReadDocuments, ChunkDocuments, ...): what Dataflow's UI shows first.
        'stages': sorted({t.unique_name for t in transforms.values() if t.unique_name and '/' not in t.unique_name
                         and not t.unique_name.startswith('ref_')}),  # ids of unnamed transforms
        'transforms': sorted(t.unique_name for t in transforms.values()),
        'environments': environments,
        'options': options.get_all_options(drop_default=True),
    }


def artifact(dependency: beam_runner_api_pb2.ArtifactInformation) -> dict:
    """One file a worker receives: its staged name, and the packages it requires when it is a sdist."""
    path = beam_runner_api_pb2.ArtifactFilePayload.FromString(dependency.type_payload)
    staged = (beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dependency.role_payload).staged_name
              if dependency.role_payload else None)
    described = {'staged_name': staged, 'path': path.path, 'sha256': path.sha256 or None}
    if staged == SETUP_FILE_ARTIFACT:
        described['requires'] = sdist_requirements(path.path)
    return described


def sdist_requirements(path: str) -> Optional[list[str]]:
    """The `Requires-Dist` lines of a source distribution's PKG-INFO (what pip installs with it)."""
    try:
        with tarfile.open(path) as sdist:
            member = next(m for m in sdist.getmembers() if m.name.count('/') == 1 and m.name.endswith('/PKG-INFO'))
            info = sdist.extractfile(member).read().decode('utf-8')
    except (OSError, tarfile.TarError, StopIteration):
        return None
    return [line.split(':', 1)[1].strip() for line in info.splitlines() if line.startswith('Requires-Dist:')]


def summary(description: dict) -> str:
    """The line `ragsieve build` prints for a translated job."""
    env = description['environments'][0] if description['environments'] else {}
    staged = ', '.join(a['staged_name'] for a in env.get('artifacts', []) if a['staged_name'])
    return (f"ragsieve build: DataflowRunner --dry_run: job {description['job_name']} translated, "
            f"{len(description['stages'])} stages ({len(description['transforms'])} transforms); workers run "
            f"{env.get('image')} with {staged or 'nothing staged'}; nothing was submitted or written")


def dry_run(options: PipelineOptions) -> bool:
    """Whether the build is only translated (`--dry_run`), refusing a value Beam would misread.

    Beam takes any non-empty `--dry_run` value as true, `--dry_run false`
    included, and only the DataflowRunner honours it.

    Raises:
      ValueError: For `--dry_run false`/`0`/`no`, or a dry run on another runner.
    """
    value = options.view_as(TestOptions).dry_run
    if not value:
        return False
    if str(value).strip().lower() in ('false', '0', 'no', 'off'):
        raise ValueError(f'--dry_run {value}: Beam takes any value as true; leave the flag out to run the build')
    runner = options.view_as(StandardOptions).runner
    if runner is None or runners.short_name(runner) != 'dataflow':
        raise ValueError(f'--dry_run: only the DataflowRunner translates a job without running it, not '
                         f'{runner or "the DirectRunner"}')
    return True


def check_workers_get_ragsieve(options: PipelineOptions) -> None:
    """Refuses a Dataflow job whose workers would have neither ragsieve nor its models.

    Raises:
      ValueError: Without `--setup_file` (the sdist of ragsieve, whose
        requirements are its models' packages) or an `--sdk_container_image`.
    """
    runner = options.view_as(StandardOptions).runner
    if runner is None or runners.short_name(runner) != 'dataflow':
        return
    setup = options.view_as(SetupOptions)
    image = options.get_all_options().get('sdk_container_image')
    if not setup.setup_file and not image:
        raise ValueError('--runner DataflowRunner: its workers would not have ragsieve or its models: pass '
                         '--setup_file ./setup.py (the sdist of ragsieve, which requires the model packages) or '
                         '--sdk_container_image with ragsieve installed')
