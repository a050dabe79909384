#!/usr/bin/env bash
# Installs Apache Airflow in a virtual environment of its own, apart from ragsieve's
# (Airflow pins its own dependencies), for examples/airflow_dag.py and its test.
# Usage: examples/install_airflow.sh [VENV]   (default: .airflow-venv in the repository, where
# tests/examples/test_airflow_dag.py looks unless $RAGSIEVE_AIRFLOW_VENV names another).
# Airflow's constraint files live on GitHub; set AIRFLOW_CONSTRAINTS to a file or URL to use one.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-${RAGSIEVE_AIRFLOW_VENV:-$REPO/.airflow-venv}}"
AIRFLOW_VERSION="${AIRFLOW_VERSION:-3.3.2}"
PYTHON="${PYTHON:-python3}"
if [ -x "$VENV/bin/airflow" ] && "$VENV/bin/airflow" version 2>/dev/null | grep -qx "$AIRFLOW_VERSION"; then
  echo "airflow $AIRFLOW_VERSION already in $VENV"; exit 0
fi
"$PYTHON" -m venv "$VENV"
args=("apache-airflow==$AIRFLOW_VERSION" "apache-airflow-providers-standard")
if [ -n "${AIRFLOW_CONSTRAINTS:-}" ]; then args+=(--constraint "$AIRFLOW_CONSTRAINTS"); fi
"$VENV/bin/pip" install --quiet "${args[@]}"
"$VENV/bin/airflow" version
