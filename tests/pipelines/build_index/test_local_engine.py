"""`--runner FlinkRunner` with no cluster: the embedded Flink's defaults, its configuration and spill directory."""

import json
import os

import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.build_index import local_engine, runners


@pytest.fixture
def engines_home(tmp_path, monkeypatch):
    """An engines cache holding a Flink job server jar (an empty file: nothing here starts it)."""
    jar = tmp_path / f'flink-job-server-{local_engine.BEAM_JAVA}' / 'job-server.jar'
    jar.parent.mkdir()
    jar.write_bytes(b'')
    monkeypatch.setenv('RAGSIEVE_ENGINES', str(tmp_path))
    return jar


def defaults(*flags):
    return runners.with_engine_defaults(PipelineOptions(['--runner', 'FlinkRunner', *flags])).get_all_options()


@pytest.mark.parametrize('master', [(), ('--flink_master', '[local]'), ('--flink_master', '[auto]')])
def test_an_embedded_flink_gets_this_machines_job_server_cores_heap_and_process_workers(engines_home, master):
    options = defaults(*master)
    assert options['flink_job_server_jar'] == str(engines_home)
    assert options['flink_version'] == local_engine.FLINK_VERSION
    assert options['parallelism'] == len(os.sched_getaffinity(0))
    assert options['job_server_jvm_properties'] == [f'-Xmx{local_engine.JVM_HEAP}']
    # SDK workers of their own, not LOOPBACK threads of the launcher, which would then hold them.
    assert options['environment_type'] == 'PROCESS'
    assert json.loads(options['environment_config'])['command'].endswith('ragsieve-sdk-worker')


def test_what_the_user_chose_for_an_embedded_flink_stays(engines_home, tmp_path):
    jar = tmp_path / 'own.jar'
    options = defaults('--flink_job_server_jar', str(jar), '--flink_version', '1.20', '--parallelism', '3',
                       '--job_server_jvm_properties=-Xmx5g', '--environment_type', 'LOOPBACK')
    assert (options['flink_job_server_jar'], options['flink_version'], options['parallelism']) == (str(jar), '1.20', 3)
    assert options['job_server_jvm_properties'] == ['-Xmx5g']
    assert options['environment_type'] == 'LOOPBACK'


def test_a_flink_cluster_named_gets_none_of_it(engines_home):
    options = defaults('--flink_master', 'localhost:8081')
    assert options['flink_job_server_jar'] is None and options['job_server_jvm_properties'] == []
    assert not runners.is_local_flink(PipelineOptions(['--runner', 'FlinkRunner', '--flink_master', 'localhost:8081']))


def test_no_job_server_is_one_line_saying_to_run_make_engines(tmp_path, monkeypatch):
    monkeypatch.setenv('RAGSIEVE_ENGINES', str(tmp_path))
    with pytest.raises(ValueError, match=r'there is none at .*job-server\.jar: run `make engines`') as raised:
        defaults()
    assert '\n' not in str(raised.value)


def test_the_configuration_and_spill_directory_live_as_long_as_the_job(engines_home):
    options = runners.with_engine_defaults(PipelineOptions(['--runner', 'FlinkRunner', '--parallelism', '3']))
    with pytest.raises(RuntimeError, match='the job failed'):
        with local_engine.running(options) as work:
            config = yaml.safe_load(open(os.path.join(work, 'config.yaml')))
            assert options.get_all_options()['flink_conf_dir'] == work
            assert config['taskmanager.numberOfTaskSlots'] == config['parallelism.default'] == 3
            assert config['io.tmp.dirs'] == os.path.join(work, 'spill') and os.path.isdir(config['io.tmp.dirs'])
            open(os.path.join(config['io.tmp.dirs'], 'spilled'), 'w').close()
            raise RuntimeError('the job failed')
    assert not os.path.exists(work)
    assert options.get_all_options()['flink_conf_dir'] is None


def test_a_users_flink_configuration_is_left_alone(engines_home, tmp_path):
    options = runners.with_engine_defaults(PipelineOptions(['--runner', 'FlinkRunner', '--flink_conf_dir',
                                                            str(tmp_path)]))
    with local_engine.running(options) as work:
        assert work is None and options.get_all_options()['flink_conf_dir'] == str(tmp_path)
    assert os.listdir(tmp_path) == [f'flink-job-server-{local_engine.BEAM_JAVA}']


def test_relative_paths_reach_an_embedded_flinks_workers(engines_home):
    # Its job server runs in the launcher's directory, and so do the SDK workers it starts.
    options = runners.with_engine_defaults(PipelineOptions(['--runner', 'FlinkRunner']))
    runners.check_paths_reach_workers(options, {'--input': 'docs', '--output': 'out', '--cache': None})


def test_the_build_looks_for_the_job_server_where_make_engines_puts_it(tmp_path, monkeypatch):
    # engines/ and the build never import each other (test_architecture.py): each names the place, and they agree.
    from engines import fetch, flink

    monkeypatch.setenv('RAGSIEVE_ENGINES', str(tmp_path))
    assert fetch.launcher_path(fetch.FLINK) == local_engine.flink_job_server_jar()
    monkeypatch.delenv('RAGSIEVE_ENGINES')
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    assert fetch.home() == local_engine.engines_home()
    assert (fetch.BEAM_JAVA, flink.BEAM_FLINK_VERSION) == (local_engine.BEAM_JAVA, local_engine.FLINK_VERSION)
