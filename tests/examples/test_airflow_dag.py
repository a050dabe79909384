"""The nightly DAG in a real Apache Airflow: two nightly dates, a re-run of a published night and of a refused one.

Airflow lives in a virtual environment of its own (`examples/install_airflow.sh`,
into `.airflow-venv` or $RAGSIEVE_AIRFLOW_VENV); without it these tests skip,
saying what to install, unless RAGSIEVE_REQUIRE_AIRFLOW=1 (CI after the install).
"""

import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

EXAMPLES = REPO / 'examples'
DAG_ID = 'ragsieve_nightly_rebuild'
AIRFLOW_VENV = Path(os.environ.get('RAGSIEVE_AIRFLOW_VENV', REPO / '.airflow-venv'))
AIRFLOW = AIRFLOW_VENV / 'bin' / 'airflow'
# Three of the seven documents of sample_corpus: the night they vanish, the gates refuse the run.
VANISHED = ('guides/bicycle.md', 'guides/sourdough.md', 'guides/tyres.html')


def test_airflow_dag_compiles(tmp_path):
    py_compile.compile(str(EXAMPLES / 'airflow_dag.py'), cfile=str(tmp_path / 'dag.pyc'), doraise=True)


@pytest.fixture(scope='module')
def airflow_home(tmp_path_factory):
    """An Airflow home with a migrated SQLite database, the DAG folder examples/; its environment."""
    if not AIRFLOW.exists():
        reason = f'no Airflow in {AIRFLOW_VENV}: run examples/install_airflow.sh {AIRFLOW_VENV}'
        if os.environ.get('RAGSIEVE_REQUIRE_AIRFLOW') == '1':
            pytest.fail(reason)
        pytest.skip(reason)
    home = tmp_path_factory.mktemp('airflow')
    env = {**os.environ, 'AIRFLOW_HOME': str(home), 'AIRFLOW__CORE__LOAD_EXAMPLES': 'False',
           'AIRFLOW__CORE__DAGS_FOLDER': str(EXAMPLES), 'RAGSIEVE_HOME': str(REPO),
           'RAGSIEVE_PYTHON': sys.executable, 'RAGSIEVE_INPUT': str(home / 'corpus'),
           'RAGSIEVE_OUTPUT': str(home / 'index')}
    env.pop('VIRTUAL_ENV', None)
    done = subprocess.run([str(AIRFLOW), 'db', 'migrate'], env=env, cwd=home, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shutil.copytree(REPO / 'sample_corpus', home / 'corpus')
    return home, env


def dags_test(env, home, logical_date):
    """`airflow dags test` of the DAG for one date: `(exit status, output)`."""
    done = subprocess.run([str(AIRFLOW), 'dags', 'test', DAG_ID, logical_date], env=env, cwd=home,
                          capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout + done.stderr


def task_states(output):
    return [line.split('new_state=')[1].split()[0] for line in output.splitlines() if 'new_state=' in line]


def test_two_nights_a_rerun_of_a_published_night_and_of_a_refused_one(airflow_home):
    home, env = airflow_home
    index = home / 'index'

    status, out = dags_test(env, home, '2026-01-02T02:15:00+00:00')
    assert status == 0 and task_states(out) == ['success'], out[-4000:]
    assert (index / 'LATEST').read_text() == '20260102T021500\n'

    # Cleared, or a retry after the build published: the run exists and is published, so the night is green.
    status, out = dags_test(env, home, '2026-01-02T02:15:00+00:00')
    assert status == 0 and task_states(out) == ['success'], out[-4000:]
    assert 'run 20260102T021500 was published by an earlier try' in out

    # The next night three documents vanished: the gates refuse it, and the task fails once, not retried.
    for name in VANISHED:
        (home / 'corpus' / name).unlink()
    status, out = dags_test(env, home, '2026-01-03T02:15:00+00:00')
    assert status != 0 and task_states(out) == ['failed'], out[-4000:]
    assert 'AirflowFailException: run 20260103T021500 is complete but its publish gates refused it' in out
    assert (index / 'LATEST').read_text() == '20260102T021500\n'

    # Cleared: it still says what happened, not "already exists".
    status, out = dags_test(env, home, '2026-01-03T02:15:00+00:00')
    assert status != 0 and task_states(out) == ['failed'], out[-4000:]
    assert 'run 20260103T021500 was refused by its publish gates (rejected_rise, documents_drop, kept_drop)' in out


def test_the_run_id_and_what_each_exit_status_means(airflow_home):
    """The DAG's decisions, in Airflow's interpreter: a manual run without a logical date, every exit status."""
    home, env = airflow_home
    script = '''
import datetime, json, sys
sys.path.insert(0, sys.argv[1])
import airflow_dag as d
after = datetime.datetime(2026, 3, 4, 5, 6, 7)
exists = "ragsieve build: error: run 'r2' already exists under /i: choose another --run_id"
refused = {'passed': False, 'enforced': True, 'failed': ['kept_drop']}
print(json.dumps({
    'manual': d.ragsieve_run_id(None, after),
    'nightly': d.ragsieve_run_id(datetime.datetime(2026, 1, 2, 2, 15), after),
    'codes': [d.outcome(code, 'x', 'r2', None)[0] for code in (0, 1, 2, 4, 5, 6, 130, -9)],
    'published': d.outcome(2, exists, 'r2', {'latest': 'r2', 'gates': {'passed': True}})[0],
    'later': d.outcome(2, exists, 'r2', {'latest': 'r3', 'gates': {'passed': True}})[0],
    'refused': d.outcome(2, exists, 'r2', {'latest': 'r3', 'gates': refused}),
    'unpublished': d.outcome(2, exists, 'r2', {'latest': 'r1', 'gates': {'passed': True}}),
    'unreadable': d.outcome(2, exists, 'r2', None)[0],
}))
'''
    done = subprocess.run([str(AIRFLOW_VENV / 'bin' / 'python'), '-c', script, str(EXAMPLES)], env=env, cwd=home,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got['manual'] == '20260304T050607' and got['nightly'] == '20260102T021500'
    assert got['codes'] == ['ok', 'retry', 'retry', 'fail', 'fail', 'retry', 'retry', 'retry']
    assert got['published'] == 'ok' and got['later'] == 'ok' and got['unreadable'] == 'retry'
    assert got['refused'][0] == 'fail' and 'refused by its publish gates (kept_drop)' in got['refused'][1]
    assert got['unpublished'][0] == 'fail' and 'never published' in got['unpublished'][1]
