"""The runner a build runs on: Beam's FnApiRunner for the DirectRunner, Beam's own choice for the rest."""

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.build_index import runners


@pytest.mark.parametrize('flags', [(), ('--runner', 'DirectRunner'), ('--runner', 'direct')])
def test_the_direct_runner_is_its_fn_api_runner_without_a_prism_attempt(flags):
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    options = PipelineOptions(['--direct_running_mode', 'multi_processing', *flags])
    runner = runners.direct_runner(options)
    assert isinstance(runner, FnApiRunner)
    # The workers of multi_processing read the options from the provision info, as under Beam's DirectRunner.
    assert 'multi_processing' in str(runner._provision_info.provision_info.pipeline_options)


@pytest.mark.parametrize('runner', ['PortableRunner', 'FlinkRunner', 'PrismRunner'])
def test_other_runners_are_built_by_beam(runner):
    assert runners.direct_runner(PipelineOptions(['--runner', runner])) is None


def engine_options(*flags):
    return runners.with_engine_defaults(PipelineOptions(list(flags)))


@pytest.mark.parametrize('flags', [('--runner', 'FlinkRunner', '--flink_master', 'localhost:8081'),
                                   ('--runner', 'SparkRunner', '--spark_master_url', 'spark://127.0.0.1:7077'),
                                   ('--runner', 'PortableRunner', '--job_endpoint', 'jobserver.internal:8099')])
def test_a_cluster_gets_sdk_workers_of_this_installation_kept_across_stages(flags):
    import json
    import os
    import sys

    options = engine_options(*flags).get_all_options()
    assert options['environment_type'] == 'PROCESS'
    command = json.loads(options['environment_config'])['command']
    assert command == os.path.join(os.path.dirname(sys.executable), 'ragsieve-sdk-worker') and os.access(command, os.X_OK)
    assert int(options['environment_cache_millis']) == runners.ENVIRONMENT_CACHE_MILLIS


def test_what_the_user_chose_stays():
    options = engine_options('--runner', 'FlinkRunner', '--flink_master', 'localhost:8081', '--environment_type',
                             'EXTERNAL', '--environment_config', 'localhost:50000',
                             '--environment_cache_millis', '5').get_all_options()
    assert (options['environment_type'], options['environment_config'], options['environment_cache_millis']) == (
        'EXTERNAL', 'localhost:50000', '5')
    # Other runners are left alone (Flink's embedded cluster: test_local_engine.py).
    assert engine_options('--runner', 'PortableRunner').get_all_options()['environment_type'] is None
    # Beam's job service in this process runs its workers here too.
    assert engine_options('--runner', 'PortableRunner', '--job_endpoint', 'embed').get_all_options()[
        'environment_type'] is None


def test_relative_paths_are_refused_where_workers_run_elsewhere():
    paths = {'--input': 'docs', '--output': '/abs/out', '--cache': None}
    for flags in (['--runner', 'FlinkRunner', '--flink_master', 'jm:8081'], ['--runner', 'SparkRunner'],
                  ['--runner', 'DataflowRunner']):
        with pytest.raises(ValueError, match=r'--input docs: a relative path, which the \w+ workers would resolve'):
            runners.check_paths_reach_workers(PipelineOptions(flags), paths)
    runners.check_paths_reach_workers(PipelineOptions(['--runner', 'FlinkRunner']), {'--input': 'gs://b/docs'})
    with pytest.raises(ValueError, match=r'--input docs: a relative path, which the PortableRunner workers'):
        runners.check_paths_reach_workers(PipelineOptions(['--runner', 'PortableRunner', '--job_endpoint', 'h:8099']),
                                          paths)
    for flags in ([], ['--runner', 'DirectRunner'], ['--runner', 'PortableRunner']):
        runners.check_paths_reach_workers(PipelineOptions(flags), paths)
