"""Airflow DAG: the nightly ragsieve rebuild, one task that runs `ragsieve build` and says what its exit status means.

Needs Apache Airflow 3 alone on the Airflow side (`apache-airflow`, with its
standard provider; `examples/install_airflow.sh` installs it in a virtual
environment of its own) and ragsieve installed (`make setup`) in
RAGSIEVE_HOME. The task runs ragsieve's own command in ragsieve's own
interpreter, so Airflow's dependencies and ragsieve's never meet, and any
runner works from its flags: RAGSIEVE_BUILD_FLAGS (`$(cat /tmp/flink/build_flags)`
for a local Flink or Spark cluster), or RAGSIEVE_RUNNER=DataflowRunner with
the GCP variables below. The Beam provider's `BeamRunPythonPipelineOperator`
is not used: it imports the Google provider (128 more packages) even for a
local runner, and it cannot tell a refused run from a failed one.

The run id comes from the DAG run's logical date, or, for a manual run
without one, from the time it was triggered (`run_after`), so a retried or
cleared run writes the same run directory. What each exit status means
(`ragsieve build`'s table, docs/cli.md) decides the task's state:
  0  published: success.
  5  complete, refused by a publish gate: failed, not retried (a retry
     cannot change the verdict); the log names the gates and the command
     that publishes it after a look.
  4  published, its --sync failed: failed, not retried (a retry would not
     sync); run `ragsieve sync`.
  2  "run ... already exists" (a retry or a re-run of a run an earlier try
     finished): what that try did: success if LATEST names the run (or a
     later one, over a run that passed its gates), failed (not retried) if
     its gates refused it or it was stopped before it was published.
  anything else (a held lock, an engine's failure, a kill): failed, retried.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections import deque
from typing import Optional

import pendulum
from airflow.sdk import dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

RAGSIEVE = os.environ.get('RAGSIEVE_HOME', '/opt/ragsieve')
PYTHON = os.environ.get('RAGSIEVE_PYTHON', f'{RAGSIEVE}/.venv/bin/python')
RUNNER = os.environ.get('RAGSIEVE_RUNNER', 'DirectRunner')
INPUT = os.environ.get('RAGSIEVE_INPUT', '/data/docs')
OUTPUT = os.environ.get('RAGSIEVE_OUTPUT', '/data/index')
KEEP_RUNS = 7

# `ragsieve build`'s exit statuses (pipelines/common/exits.py EXIT_CODES).
OK, FAILED, SYNC_FAILED, REFUSED = 0, 2, 4, 5
RUN_EXISTS = 'already exists under'
# What an earlier try left, read with ragsieve's own code (local or object storage): LATEST and the run's gates.
RUN_STATE = '''import json, sys
from pipelines.build_index.gates import read_manifest
from transforms.output import snapshots
root, run_id = sys.argv[1:]
manifest = read_manifest(snapshots.run_dir(root, run_id)) or {}
print(json.dumps({'latest': snapshots.read_latest(root), 'gates': manifest.get('gates')}))
'''


def ragsieve_run_id(logical_date, run_after) -> str:
    """The build's --run_id: the logical date, or when a manual run without one was triggered (`20260102T021500`)."""
    return (logical_date or run_after).strftime('%Y%m%dT%H%M%S')


def build_command(run_id: str) -> list[str]:
    """`ragsieve build` for one night, in ragsieve's interpreter."""
    flags = ['--input', INPUT, '--output', OUTPUT, '--versioned', '--keep_runs', str(KEEP_RUNS),
             '--run_id', run_id, '--progress', 'log']
    if RUNNER == 'DataflowRunner':
        flags += ['--runner', RUNNER, '--project', os.environ['GCP_PROJECT'],
                  '--region', os.environ.get('GCP_REGION', 'europe-west1'),
                  '--temp_location', os.environ['GCS_TEMP'],  # gs://BUCKET/tmp
                  '--setup_file', f'{RAGSIEVE}/setup.py']
    elif RUNNER != 'DirectRunner':
        flags += ['--runner', RUNNER]
    return [PYTHON, '-m', 'pipelines.cli', 'build', *flags, *shlex.split(os.environ.get('RAGSIEVE_BUILD_FLAGS', ''))]


def outcome(status: int, tail: str, run_id: str, state: Optional[dict]) -> tuple[str, str]:
    """What a `ragsieve build` exit means for the task: `('ok' | 'fail' | 'retry', what to log)`.

    Args:
      status: The build's exit status.
      tail: The last lines it printed.
      run_id: Its --run_id.
      state: For a run that already existed, what the earlier try left:
        `{'latest': run LATEST names, 'gates': the run's verdict}`.
    """
    if status == OK:
        return 'ok', f'run {run_id} published'
    if status == REFUSED:
        return 'fail', f'run {run_id} is complete but its publish gates refused it:\n{tail}'
    if status == SYNC_FAILED:
        return 'fail', f'run {run_id} is published but its sync failed (run `ragsieve sync` again):\n{tail}'
    if status == FAILED and RUN_EXISTS in tail and state is not None:
        latest, verdict = state.get('latest'), state.get('gates') or {}
        if latest == run_id:
            return 'ok', f'run {run_id} was published by an earlier try (LATEST names it): nothing to do'
        if verdict and not verdict.get('passed', True) and verdict.get('enforced', True):
            return 'fail', (f'run {run_id} was refused by its publish gates ({", ".join(verdict.get("failed", []))}) '
                            f'on an earlier try; after a look: ragsieve publish --output {OUTPUT} --run {run_id}')
        if latest is not None and latest > run_id:  # the run ids of this DAG sort by date
            return 'ok', f'run {run_id} is complete and a later run is published (LATEST names {latest}): nothing to do'
        return 'fail', (f'run {run_id} is complete but was never published (an earlier try stopped before it; '
                        f'LATEST names {latest}); after a look: ragsieve publish --output {OUTPUT} --run {run_id}')
    return 'retry', f'ragsieve build exited with status {status}:\n{tail}'


def run_state(run_id: str) -> Optional[dict]:
    """What an earlier try of `run_id` left under OUTPUT (see RUN_STATE), or None if it cannot be read."""
    done = subprocess.run([PYTHON, '-c', RUN_STATE, OUTPUT, run_id], cwd=RAGSIEVE, capture_output=True, text=True)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f'could not read the state of run {run_id}: {done.stderr.strip()[-500:]}', file=sys.stderr)
        return None


@dag(
    dag_id='ragsieve_nightly_rebuild',
    schedule='15 2 * * *',
    start_date=pendulum.datetime(2026, 1, 1, tz='UTC'),
    catchup=False,
    max_active_runs=1,  # one build per output root at a time
    tags=['ragsieve'],
)
def ragsieve_nightly_rebuild():
    @task(retries=1)
    def build_index() -> str:
        context = get_current_context()
        run_id = ragsieve_run_id(context.get('logical_date'), context['dag_run'].run_after)
        command = build_command(run_id)
        print('running', shlex.join(command), flush=True)
        tail: deque = deque(maxlen=40)
        # The build's lines go to the task's log as they come; the last ones decide and explain.
        with subprocess.Popen(command, cwd=RAGSIEVE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              bufsize=1) as build:
            for line in build.stdout:
                print(line, end='', flush=True)
                tail.append(line)
        text = ''.join(tail).rstrip()
        state = run_state(run_id) if build.returncode == FAILED and RUN_EXISTS in text else None
        verdict, message = outcome(build.returncode, text, run_id, state)
        if verdict == 'ok':
            print(message, flush=True)
            return run_id
        if verdict == 'fail':
            raise AirflowFailException(message)
        raise RuntimeError(message)

    build_index()


ragsieve_nightly_rebuild()
