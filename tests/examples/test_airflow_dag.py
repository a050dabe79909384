"""The examples/ files that cannot run here."""

import py_compile

from tests.helpers import REPO

EXAMPLES = REPO / 'examples'


def test_airflow_dag_compiles(tmp_path):
    """Airflow is not installed here: the DAG file is compiled, not loaded by a scheduler."""
    py_compile.compile(str(EXAMPLES / 'airflow_dag.py'), cfile=str(tmp_path / 'dag.pyc'), doraise=True)
