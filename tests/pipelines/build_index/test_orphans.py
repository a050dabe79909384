"""A killed build's Flink job: recorded in the lease, cancelled by the build that takes the expired lease over.

Flink's REST API is a stand-in here (`fake_flink_rest`): the unit is what the build asks of it. A real Flink and a
real kill -9 are in test_multihost.py.
"""

import itertools

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.build_index import engine_job, orphans
from tests.helpers import fake_flink_rest


def test_a_flink_build_records_its_rest_api_and_job_name_and_others_record_nothing():
    flink = engine_job.with_job_name(PipelineOptions(['--runner', 'FlinkRunner', '--flink_master',
                                                      'jobmanager:8081']), 'r1-7')
    assert orphans.job_record(flink) == {'engine': 'flink', 'rest': 'http://jobmanager:8081', 'name': 'ragsieve-r1-7'}
    assert orphans.job_record(PipelineOptions(['--runner', 'SparkRunner', '--spark_master_url', 'spark://m:7077'])) \
        is None
    assert orphans.job_record(PipelineOptions([])) is None


def test_the_killed_builds_running_job_is_cancelled_and_waited_for():
    jobs = [{'jid': 'a1', 'name': 'ragsieve-k1-9', 'state': 'RUNNING'},
            {'jid': 'c3', 'name': 'ragsieve-other-1', 'state': 'RUNNING'}]
    with fake_flink_rest(jobs) as (rest, patched):
        said = orphans.cancel({'holder': 'launcher:9', 'job': {'engine': 'flink', 'rest': rest,
                                                                'name': 'ragsieve-k1-9'}},
                              clock=itertools.count().__next__, poll=0)
        assert not orphans.running(rest, 'ragsieve-k1-9') and orphans.running(rest, 'ragsieve-other-1')
    assert patched == ['/jobs/a1?mode=cancel']
    assert said.startswith('cancelled Flink job a1 (ragsieve-k1-9) of the killed build launcher:9 that held the '
                           'lease: ended in'), said


def test_a_job_already_ended_or_flink_gone_or_nothing_recorded_lets_the_build_go_on():
    with fake_flink_rest([{'jid': 'a1', 'name': 'ragsieve-k1-9', 'state': 'FINISHED'}]) as (rest, patched):
        said = orphans.cancel({'holder': 'h:1', 'job': {'engine': 'flink', 'rest': rest, 'name': 'ragsieve-k1-9'}})
    assert patched == [] and said == 'the killed build h:1 left no Flink job running (ragsieve-k1-9)'
    gone = orphans.cancel({'holder': 'h:1', 'job': {'engine': 'flink', 'rest': 'http://127.0.0.1:1', 'name': 'x'}})
    assert gone.startswith('could not cancel Flink job x of the killed build h:1: Flink did not answer at '
                           'http://127.0.0.1:1')
    assert orphans.cancel({'holder': 'h:1'}) is None and orphans.cancel({'holder': 'h:1', 'job': 'junk'}) is None
