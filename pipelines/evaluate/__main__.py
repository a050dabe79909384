"""`python -m pipelines.evaluate`: the evaluation job, as `ragsieve evaluate` runs it."""

import sys

from pipelines.common.failures import run_and_report
from pipelines.evaluate.job import run

sys.exit(run_and_report('evaluate', run, sys.argv[1:]))
