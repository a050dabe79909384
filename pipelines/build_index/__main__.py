"""`python -m pipelines.build_index`: the build job, as `ragsieve build` runs it."""

import sys

from pipelines.build_index.job import run
from pipelines.common import heap
from pipelines.common.failures import run_and_report

status = run_and_report('build', run, sys.argv[1:])
heap.spare_exit()
sys.exit(status)
