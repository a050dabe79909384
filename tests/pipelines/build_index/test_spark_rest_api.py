"""Spark's view of a job read by a build (pipelines/build_index/spark_rest_api.py): pure readers of its JSON, and
where a SparkRunner build finds its driver's web UI.

The JSON is in the shape Spark 3.5's driver answers `/api/v1/applications/ID/jobs` and `.../stages?status=active`
(fields a build does not read left out); the real driver is read in test_engines.py, where the stall bound ends a
Spark job that lost its only worker before any count arrived.
"""

from apache_beam.options.pipeline_options import JobServerOptions, PipelineOptions

from pipelines.build_index import engine_job, runners, spark_rest_api


def job(active, completed, status='RUNNING', failed=0):
    return {'jobId': 0, 'name': 'collect at BoundedDataset.java:96', 'status': status, 'numTasks': 4,
            'numActiveTasks': active, 'numCompletedTasks': completed, 'numSkippedTasks': 0,
            'numFailedTasks': failed, 'numKilledTasks': 0, 'numActiveStages': 1}


def stage(records, complete=0):
    return {'status': 'ACTIVE', 'stageId': 2, 'attemptId': 0, 'numActiveTasks': 1, 'numCompleteTasks': complete,
            'inputRecords': 0, 'outputRecords': records, 'shuffleReadRecords': 0, 'shuffleWriteRecords': 0}


def test_a_job_with_a_task_running_is_at_work_and_one_waiting_for_executors_is_not():
    assert spark_rest_api.jobs_look([job(active=1, completed=0)], [stage(0)]).running
    waiting = spark_rest_api.jobs_look([job(active=0, completed=2)], [])
    assert not waiting.running
    assert not spark_rest_api.jobs_look([job(active=0, completed=4, status='SUCCEEDED')], []).running


def test_progress_moves_with_tasks_and_records_and_stands_still_otherwise():
    look = spark_rest_api.jobs_look
    assert look([job(0, 2)], []).progress == look([job(0, 2)], []).progress
    assert look([job(0, 2)], []).progress != look([job(0, 3)], []).progress
    assert look([job(0, 2)], []).progress != look([job(0, 2, failed=1)], []).progress
    assert look([job(1, 2)], [stage(10)]).progress != look([job(1, 2)], [stage(20)]).progress
    assert look(['not a job'], ['nor a stage']).progress == ((), ())


def test_a_driver_that_does_not_answer_shows_nothing():
    assert spark_rest_api.look('http://127.0.0.1:9') is None


def test_a_sparkrunner_build_gives_its_driver_s_ui_a_port_and_looks_there():
    options = runners.with_spark_ui_port(PipelineOptions(['--runner', 'SparkRunner']))
    port = runners.spark_ui_port(options)
    assert port and engine_job.spark_ui(options) == f'http://127.0.0.1:{port}'
    assert engine_job.engine_look(options) is not None
    mine = PipelineOptions(['--runner', 'SparkRunner', '--job_server_jvm_properties=-Dspark.ui.port=4050'])
    runners.with_spark_ui_port(mine)
    assert mine.view_as(JobServerOptions).job_server_jvm_properties == ['-Dspark.ui.port=4050']
    flink = runners.with_spark_ui_port(PipelineOptions(['--runner', 'FlinkRunner']))
    assert runners.spark_ui_port(flink) is None and engine_job.spark_ui(flink) is None
