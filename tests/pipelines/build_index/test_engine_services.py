"""The services a job depends on, read from the build's flags, and the line naming the first that does not answer.

Pure: `answer` stands in for the network where the unit is the line, not the probe; the probe itself is tried on
a socket of this test's (and on the simulated hosts, in test_multihost.py).
"""

import socket

from apache_beam.options.pipeline_options import PipelineOptions

import pipelines.build_index.options  # noqa: F401 - the build's flags
from pipelines.build_index import engine_services
from pipelines.build_index.engine_services import Service

HARNESS = ['--runner', 'PortableRunner', '--job_endpoint', 'jobserver:8099', '--flink_master', 'jobmanager:8081']


def test_the_job_server_the_jobmanager_and_the_store_are_read_from_the_flags_and_environment():
    found = engine_services.services(PipelineOptions(HARNESS), {'AWS_ENDPOINT_URL_S3': 'http://storage:9000'})
    assert found == [Service('Beam job server', 'jobserver', 8099, '--job_endpoint'),
                     Service('Flink JobManager', 'jobmanager', 8081, '--flink_master'),
                     Service('object store', 'storage', 9000, 'AWS_ENDPOINT_URL_S3')]
    flagged = engine_services.services(PipelineOptions(['--runner', 'SparkRunner', '--spark_master_url',
                                                        'spark://master:7077', '--s3_endpoint_url',
                                                        'https://s3.example.com']), {})
    assert flagged == [Service('Spark master', 'master', 7077, '--spark_master_url'),
                       Service('object store', 's3.example.com', 443, '--s3_endpoint_url')]
    # An embedded engine, no store named: nothing to ask.
    assert engine_services.services(PipelineOptions(['--runner', 'FlinkRunner']), {}) == []


def test_the_line_names_the_first_service_that_does_not_answer():
    options = PipelineOptions(HARNESS)
    lost = {'jobmanager'}
    assert engine_services.silent_line(options, lambda s: s.host not in lost) == (
        'the Flink JobManager at jobmanager:8081 (--flink_master) does not answer')
    assert engine_services.silent_line(options, lambda s: True) is None


def test_a_port_nothing_listens_on_does_not_answer_and_a_listening_one_does():
    with socket.socket() as listening:
        listening.bind(('127.0.0.1', 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert engine_services.answers(Service('Flink JobManager', '127.0.0.1', port, '--flink_master'))
    assert not engine_services.answers(Service('Flink JobManager', '127.0.0.1', port, '--flink_master'), 1.0)
