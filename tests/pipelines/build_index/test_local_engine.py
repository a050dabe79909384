"""`--runner FlinkRunner` with no cluster: the local Flink's defaults, partitions and configuration (its runs:
test_engines.py)."""

import json
import os

import pytest
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
    assert options['job_server_jvm_properties'] == [f'-Xmx{local_engine.JOB_SERVER_HEAP}']
    assert options['execution_mode_for_batch'] == 'BATCH_FORCED'  # many partitions run in waves on the slots
    # SDK workers of their own, not LOOPBACK threads of the launcher, which would then hold them.
    assert options['environment_type'] == 'PROCESS'
    assert json.loads(options['environment_config'])['command'].endswith('ragsieve-sdk-worker')


def test_what_the_user_chose_for_an_embedded_flink_stays(engines_home, tmp_path):
    jar = tmp_path / 'own.jar'
    options = defaults('--flink_job_server_jar', str(jar), '--flink_version', '1.20', '--parallelism', '3',
                       '--job_server_jvm_properties=-Xmx5g', '--environment_type', 'LOOPBACK',
                       '--execution_mode_for_batch', 'PIPELINED')
    assert (options['flink_job_server_jar'], options['flink_version'], options['parallelism']) == (str(jar), '1.20', 3)
    assert options['job_server_jvm_properties'] == ['-Xmx5g'] and options['execution_mode_for_batch'] == 'PIPELINED'
    given = runners.with_engine_defaults(PipelineOptions(['--runner', 'FlinkRunner', '--parallelism', '3']))
    assert local_engine.with_input_size(given, 1 << 40).get_all_options()['parallelism'] == 3
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


def test_partitions_of_bounded_input_at_least_one_per_core(engines_home):
    cores = len(os.sched_getaffinity(0))
    assert local_engine.partitions(0) == local_engine.partitions(local_engine.PARTITION_BYTES) == max(1, cores)
    assert local_engine.partitions(100 * local_engine.PARTITION_BYTES + 1) == max(101, cores)
    options = runners.with_engine_defaults(PipelineOptions(['--runner', 'FlinkRunner']))
    assert local_engine.with_input_size(options, 40 * local_engine.PARTITION_BYTES).get_all_options()[
        'parallelism'] == max(40, cores)


def test_the_spill_is_estimated_per_chunk_against_the_free_disk_of_its_directory(tmp_path):
    import shutil

    estimate = local_engine.spill_estimate(1000, str(tmp_path))
    assert estimate.spill_bytes == 1000 * local_engine.SPILL_BYTES_PER_CHUNK
    assert estimate.free_bytes == pytest.approx(shutil.disk_usage(tmp_path).free, rel=0.01) and estimate.fits
    huge = local_engine.spill_estimate(estimate.free_bytes // local_engine.SPILL_BYTES_PER_CHUNK + 10, str(tmp_path))
    assert not huge.fits
    line = local_engine.spill_refusal(huge, '3 GB')
    assert '\n' not in line and str(tmp_path) in line and 'TMPDIR' in line


def test_the_local_clusters_configuration_bounds_memory_and_spills_where_asked(tmp_path):
    from pipelines.build_index import local_flink

    config = local_flink.config(3, tmp_path / 'spill', 8081)
    assert config['taskmanager.numberOfTaskSlots'] == 3 and config['io.tmp.dirs'] == str(tmp_path / 'spill')
    assert config['taskmanager.memory.process.size'] == local_flink.TASKMANAGER_MEMORY
    assert config['restart-strategy.type'] == 'none' and config['classloader.resolve-order'] == 'parent-first'
    assert config['rest.bind-address'] == config['taskmanager.bind-host'] == '127.0.0.1'


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


def test_sdk_workers_outlive_the_stages_of_javas_alone(engines_home):
    # Idle for the minutes a sort takes, they were closed as the next stage's task took them (30 s: call is closed).
    options = defaults()
    assert int(options['environment_cache_millis']) == local_engine.ENVIRONMENT_CACHE_MILLIS
    assert int(defaults('--environment_cache_millis', '5000')['environment_cache_millis']) == 5000
