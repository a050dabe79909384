"""The engines' own per-job flags reach the job service; a Flink job asks for restarts unless the build names its own."""

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.runners.portability.portable_runner import JobServiceHandle

from pipelines.build_index import engine_options, runners
from pipelines.build_index.command_line import parse_args

PATHS = ['--input', '/data/docs', '--output', '/data/index']
FLINK = ['--runner', 'FlinkRunner', '--flink_master', 'localhost:8081']


class DescribingJobService:
    """A job service that describes options as Beam's Java job server does (the request Beam's runner sends first)."""

    def DescribePipelineOptions(self, request, timeout=None):
        kinds = beam_job_api_pb2.PipelineOptionType
        described = [beam_job_api_pb2.PipelineOptionDescriptor(name=name, type=kinds.INTEGER if kind is int
                                                               else kinds.STRING)
                     for name, (kind, _, _) in {**engine_options.FLINK_FLAGS, **engine_options.SPARK_FLAGS}.items()]
        return beam_job_api_pb2.DescribePipelineOptionsResponse(options=described)


def sent_to_job_service(options: PipelineOptions) -> dict:
    """The options Beam's portable runner sends with the job (`beam:option:NAME:v1`), by name."""
    struct = JobServiceHandle(DescribingJobService(), options).get_pipeline_options()
    return {key.split(':')[2]: value for key, value in struct.items()}


@pytest.mark.parametrize('flags, expected', [
    (['--number_of_execution_retries', '3', '--execution_retry_delay', '60000', '--checkpointing_interval', '5000',
      '--execution_mode_for_batch', 'BATCH_FORCED', '--flink_conf_dir', '/etc/flink'],
     {'number_of_execution_retries': '3', 'execution_retry_delay': '60000', 'checkpointing_interval': '5000',
      'execution_mode_for_batch': 'BATCH_FORCED', 'flink_conf_dir': '/etc/flink'}),
])
def test_flinks_own_flags_are_accepted_and_sent_with_the_job(flags, expected):
    sent = sent_to_job_service(parse_args(PATHS + FLINK + flags))
    assert {name: sent.get(name) for name in expected} == expected


def test_sparks_own_flags_are_accepted_and_sent_with_the_job():
    options = parse_args(PATHS + ['--runner', 'SparkRunner', '--spark_master_url', 'spark://127.0.0.1:7077',
                                  '--storage_level', 'MEMORY_AND_DISK', '--bundle_size', '1048576'])
    sent = sent_to_job_service(options)
    assert (sent['storage_level'], sent['bundle_size']) == ('MEMORY_AND_DISK', '1048576')
    assert 'number_of_execution_retries' not in sent  # Spark retries tasks by its own setting


def test_a_config_file_takes_them_too(tmp_path):
    config = tmp_path / 'build.yaml'
    config.write_text('number_of_execution_retries: 4\ncheckpointing_interval: 1000\n')
    sent = sent_to_job_service(parse_args(PATHS + FLINK + ['--config', str(config)]))
    assert (sent['number_of_execution_retries'], sent['checkpointing_interval']) == ('4', '1000')


def test_a_value_their_flag_refuses_is_one_line():
    with pytest.raises(ValueError, match=r"--number_of_execution_retries: invalid int value: 'ten'"):
        parse_args(PATHS + FLINK + ['--number_of_execution_retries', 'ten'])
    with pytest.raises(ValueError, match=r'--execution_mode_for_batch: invalid choice'):
        parse_args(PATHS + FLINK + ['--execution_mode_for_batch', 'FAST'])
    with pytest.raises(ValueError, match=r"--number_of_execution_retries must be -1 \(the cluster's setting\), 0 or "
                                         r'more, got -2'):
        parse_args(PATHS + FLINK + ['--number_of_execution_retries', '-2'])


def test_a_flink_job_asks_for_restarts_that_outlast_a_lost_host_and_the_sdk_worker_cache():
    sent = sent_to_job_service(parse_args(PATHS + FLINK))
    assert sent['number_of_execution_retries'] == str(engine_options.RESTART_ATTEMPTS) == '10'
    assert int(sent['execution_retry_delay']) == runners.ENVIRONMENT_CACHE_MILLIS + 15_000 == 45_000
    # A longer-kept idle SDK worker, a longer delay: a job restarted sooner gets the dead worker back.
    longer = sent_to_job_service(parse_args(PATHS + FLINK + ['--environment_cache_millis', '120000']))
    assert longer['execution_retry_delay'] == '135000'
    # A job server by its address (a shared Flink job server) gets them too.
    shared = parse_args(PATHS + ['--runner', 'PortableRunner', '--job_endpoint', 'localhost:8099'])
    assert sent_to_job_service(shared)['number_of_execution_retries'] == '10'


@pytest.mark.parametrize('flags, expected', [
    (['--number_of_execution_retries', '0'], ('0', '45000')),  # no restarts
    (['--number_of_execution_retries', '-1', '--execution_retry_delay', '-1'], ('-1', '-1')),  # the cluster's
    (['--number_of_execution_retries', '3', '--execution_retry_delay', '90000'], ('3', '90000')),
])
def test_the_builds_own_restarts_stay(flags, expected):
    sent = sent_to_job_service(parse_args(PATHS + FLINK + flags))
    assert (sent['number_of_execution_retries'], sent['execution_retry_delay']) == expected


@pytest.mark.parametrize('flags', [[], ['--runner', 'DirectRunner'], ['--runner', 'SparkRunner'],
                                   ['--runner', 'PortableRunner', '--job_endpoint', 'embed']])
def test_other_runners_ask_for_none(flags):
    options = runners.with_engine_defaults(PipelineOptions(flags)).get_all_options()
    assert options['number_of_execution_retries'] is None and options['execution_retry_delay'] is None
