"""The Flink cluster's configuration: loopback only, free ports, the memory and restarts asked for."""

import pytest

from engines import fetch
from engines.flink import FlinkCluster, FlinkSettings
from tests.helpers import engine_missing


@pytest.fixture
def cluster(tmp_path):
    try:
        return FlinkCluster(tmp_path, FlinkSettings(taskmanagers=3, slots=2, restart_attempts=4, restart_delay=7))
    except fetch.EngineMissing as e:
        engine_missing(str(e))


def test_the_configuration_binds_loopback_on_distinct_free_ports(cluster):
    config = cluster.config()
    assert {config[k] for k in ('jobmanager.rpc.address', 'jobmanager.bind-host', 'rest.address',
                                'rest.bind-address', 'taskmanager.host', 'taskmanager.bind-host')} == {'127.0.0.1'}
    ports = [int(config[k]) for k in ('jobmanager.rpc.port', 'blob.server.port', 'rest.port')]
    assert len(set(ports)) == 3 and config['rest.port'] == cluster.rest_port
    assert config['parallelism.default'] == 6 == cluster.settings.parallelism
    assert config['taskmanager.memory.network.min'] == config['taskmanager.memory.network.max'] == '512m'
    assert (config['restart-strategy.type'], config['restart-strategy.fixed-delay.attempts'],
            config['restart-strategy.fixed-delay.delay']) == ('fixed-delay', 4, '7 s')


def test_no_restarts_is_flinks_none_strategy(tmp_path):
    try:
        config = FlinkCluster(tmp_path, FlinkSettings(restart_attempts=0)).config()
    except fetch.EngineMissing as e:
        engine_missing(str(e))
    assert config['restart-strategy.type'] == 'none'
    assert not any(k.startswith('restart-strategy.fixed-delay') for k in config)


def test_a_cluster_restarts_a_job_through_the_failovers_of_a_lost_host_by_default(tmp_path):
    """One lost TaskManager host fails a job 3 to 4 times; the SDK worker cache keeps a dead worker 30 s."""
    try:
        config = FlinkCluster(tmp_path, FlinkSettings()).config()
    except fetch.EngineMissing as e:
        engine_missing(str(e))
    assert (config['restart-strategy.type'], config['restart-strategy.fixed-delay.attempts'],
            config['restart-strategy.fixed-delay.delay']) == ('fixed-delay', 10, '45 s')


def test_a_build_is_sent_with_beams_flags(cluster):
    flags = cluster.build_flags()
    assert flags[:4] == ['--runner', 'FlinkRunner', '--flink_master', f'localhost:{cluster.rest_port}']
    assert flags[flags.index('--parallelism') + 1] == '6'
    assert flags[flags.index('--flink_version') + 1] == '1.19'
