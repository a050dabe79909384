"""`python -m pipelines.evaluate`: the evaluation job, as `ragsieve evaluate` runs it."""

import sys

from pipelines import cli
from pipelines.evaluate.job import run

sys.exit(cli.run_and_report('evaluate', run, sys.argv[1:]))
