"""`ragsieve-sdk-worker`: the environment Beam's SDK worker starts from, read from a runner's provision info."""

import json
import os
import sys
import tempfile

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_provision_api_pb2, endpoints_pb2
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.worker import sdk_worker_main

from pipelines.build_index import sdk_worker

FLAGS = ['--id=1-2', '--provision_endpoint=localhost:7', '--control_endpoint=localhost:8',
         '--logging_endpoint=localhost:9', '--artifact_endpoint=localhost:10', '--semi_persistent_directory=/tmp/w',
         '--a_flag_a_later_contract_adds=1']


def provision_info(**endpoints):
    options = PipelineOptions(['--chunk_size', '64', '--job_name', 'j'])
    return beam_provision_api_pb2.ProvisionInfo(
        pipeline_options=JobServiceHandle.encode_pipeline_options(options.get_all_options()),
        runner_capabilities=['beam:protocol:data_sampling:v1', 'beam:protocol:sdk_consumed_artifacts_role:v1'],
        **{f'{k}_endpoint': endpoints_pb2.ApiServiceDescriptor(url=v) for k, v in endpoints.items()})


def test_the_environment_is_the_one_beams_worker_main_reads():
    flags = sdk_worker.parse_flags(FLAGS)
    env = sdk_worker.worker_environment(provision_info(control='localhost:18', status='localhost:19'), flags.id,
                                        flags, {'PATH': '/bin'})
    assert env['PATH'] == '/bin' and env['WORKER_ID'] == '1-2' and env['SEMI_PERSISTENT_DIRECTORY'] == '/tmp/w'
    # The provision info's endpoints win; those it omits come from the flags.
    assert env['CONTROL_API_SERVICE_DESCRIPTOR'].strip() == 'url: "localhost:18"'
    assert env['LOGGING_API_SERVICE_DESCRIPTOR'].strip() == 'url: "localhost:9"'
    assert env['STATUS_API_SERVICE_DESCRIPTOR'].strip() == 'url: "localhost:19"'
    assert env['RUNNER_CAPABILITIES'].split() == ['beam:protocol:data_sampling:v1',
                                                  'beam:protocol:sdk_consumed_artifacts_role:v1']
    # Beam's own worker main parses them back: the job's options reach the worker.
    options = sdk_worker_main._parse_pipeline_options(env['PIPELINE_OPTIONS']).get_all_options()
    assert json.loads(env['PIPELINE_OPTIONS']) and options['job_name'] == 'j'


def test_without_a_scratch_directory_from_the_runner_none_is_made(tmp_path, monkeypatch):
    """Flink's PROCESS environment names none: a directory made per worker was left behind by every worker."""
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    flags = sdk_worker.parse_flags([f for f in FLAGS if not f.startswith('--semi_persistent_directory')])
    env = sdk_worker.worker_environment(provision_info(), flags.id, flags, {})
    assert 'SEMI_PERSISTENT_DIRECTORY' not in env and list(tmp_path.iterdir()) == []


def test_the_console_script_is_installed_next_to_this_python():
    command = os.path.join(os.path.dirname(sys.executable), 'ragsieve-sdk-worker')
    assert os.access(command, os.X_OK)


def test_the_worker_pings_its_runner_no_more_often_than_the_java_runner_allows():
    # grpc-java answers pings more often than every 5 minutes with GOAWAY too_many_pings (apache/beam#20971).
    import subprocess
    import sys

    from pipelines.build_index.sdk_worker import WORKER_MAIN

    probe = WORKER_MAIN.split('import runpy')[0] + (
        'from apache_beam.runners.worker.channel_factory import GRPCChannelFactory as F; '
        "print(dict(F.DEFAULT_OPTIONS)['grpc.keepalive_time_ms'])")
    done = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True)
    assert int(done.stdout) >= 300_000
