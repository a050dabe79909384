"""Airflow DAG: the nightly ragsieve rebuild through the Apache Beam provider.

Needs `apache-airflow-providers-apache-beam` on the Airflow side and ragsieve
installed (`make setup`) in the interpreter named below. The run id is the
DAG run's logical date, so a retried task writes the same run directory and a
finished one is never overwritten (the build refuses an existing run id).
Set RAGSIEVE_RUNNER=DataflowRunner (and the GCP variables) to run on Dataflow.
"""

import os

import pendulum
from airflow import DAG
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator

RAGSIEVE = os.environ.get('RAGSIEVE_HOME', '/opt/ragsieve')
RUNNER = os.environ.get('RAGSIEVE_RUNNER', 'DirectRunner')

options = {
    'input': os.environ.get('RAGSIEVE_INPUT', '/data/docs'),
    'output': os.environ.get('RAGSIEVE_OUTPUT', '/data/index'),
    'versioned': True,  # the provider passes True as a bare flag: --versioned
    'keep_runs': 7,
    'run_id': '{{ ts_nodash }}',
}
if RUNNER == 'DataflowRunner':
    options.update(
        project=os.environ['GCP_PROJECT'],
        region=os.environ.get('GCP_REGION', 'europe-west1'),
        temp_location=os.environ['GCS_TEMP'],  # gs://BUCKET/tmp
        setup_file=f'{RAGSIEVE}/setup.py',
    )

with DAG(
    dag_id='ragsieve_nightly_rebuild',
    schedule='15 2 * * *',
    start_date=pendulum.datetime(2026, 1, 1, tz='UTC'),
    catchup=False,
    max_active_runs=1,  # one build per output root at a time
    tags=['ragsieve'],
) as dag:
    BeamRunPythonPipelineOperator(
        task_id='build_index',
        runner=RUNNER,
        py_file='pipelines.build_index',
        py_options=['-m'],
        py_interpreter=f'{RAGSIEVE}/.venv/bin/python',
        pipeline_options=options,
        retries=1,
    )
