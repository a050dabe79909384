"""Report job: writes (again) the report.html of a run, from its manifest, diff.json and tables.

    ragsieve report RUN_DIR   # a run directory, a plain index, or a versioned root (its LATEST run)
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from transforms.output import snapshots
from transforms.report.page import write_report


def parser() -> argparse.ArgumentParser:
    """The report flags."""
    p = argparse.ArgumentParser(prog='ragsieve report', description='Write the report.html of a run.')
    p.add_argument('run_dir', type=str,
                   help='A run directory (ROOT/runs/RUN_ID), a plain index, or a versioned root (its LATEST run).')
    p.add_argument('--per_group', type=int, default=5,
                   help='Dropped chunks shown per drop reason, and delta chunks shown.')
    return p


def run(argv: Optional[Sequence[str]] = None) -> str:
    """Writes the report; returns its path.

    Raises:
      ValueError: If the directory holds no complete run.
    """
    args = parser().parse_args(argv)
    if args.per_group < 1:
        raise ValueError(f'--per_group must be >= 1, got {args.per_group}')
    path = write_report(snapshots.resolve_index(args.run_dir.rstrip('/')), args.per_group)
    print(f'ragsieve report: wrote {path}')
    return path


if __name__ == '__main__':
    from pipelines.common.failures import run_and_report

    sys.exit(run_and_report('report', run, sys.argv[1:]))
