"""Sync job: make a vector store hold exactly the kept rows of a published run.

`ragsieve sync --index ROOT --to lancedb://PATH` (or `postgresql://...`)
syncs the run LATEST names (or a plain build's directory); `--verify` only
reports drift. The last line says what was written:
`upserted N, deleted N, unchanged N in S s`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

from pipelines.cli import DRIFT, SYNC_FAILED
from transforms.output import snapshots
from transforms.sync import store as stores
from transforms.sync.sync import DEFAULT_BATCH_ROWS, Report, SyncError, sync_run

LOG = logging.getLogger('ragsieve.sync')


class DriftFound(Exception):
    """`--verify` found the store differs from the run."""

    exit_code = DRIFT


class SyncFailed(Exception):
    """A batch failed after its retries: the store is behind, its marker unchanged."""

    exit_code = SYNC_FAILED


def parser() -> argparse.ArgumentParser:
    """The sync flags."""
    p = argparse.ArgumentParser(prog='ragsieve sync', description='Sync a published run into a vector store.')
    p.add_argument('--index', type=str, required=True,
                   help='A versioned root (its LATEST run is synced) or a plain build\'s directory.')
    p.add_argument('--to', type=str, required=True,
                   help='The store: lancedb://PATH or postgresql://USER@HOST:PORT/DB, with ?table=NAME '
                        f'(default {stores.DEFAULT_TABLE}).')
    p.add_argument('--verify', action='store_true',
                   help=f'Only report rows missing from, extra in or stale in the store, comparing what it '
                        f'holds, vectors included (exit {DRIFT} if any).')
    p.add_argument('--deep', action='store_true',
                   help='Compare what the store holds, vectors included, rather than its row hashes: also '
                        'repairs rows edited in the store by hand (reads every row of the store).')
    p.add_argument('--batch_rows', type=int, default=DEFAULT_BATCH_ROWS,
                   help='Rows per upsert, per delete and per page read from the store.')
    p.add_argument('--no_progress', action='store_true', help='Hide the progress bar.')
    return p


def sync(index: str, uri: str, verify: bool = False, batch_rows: int = DEFAULT_BATCH_ROWS,
         progress: bool = False, deep: bool = False) -> Report:
    """Syncs (or verifies) the run `index` resolves to into the store at `uri`; returns the report.

    Raises:
      ValueError: For a bad URI, a missing client library or an unreadable run.
      DriftFound: With `verify`, when the store differs from the run.
      SyncFailed: When a batch failed after its retries.
    """
    if batch_rows < 1:
        raise ValueError(f'--batch_rows must be >= 1, got {batch_rows}')
    directory = snapshots.resolve_index(index)
    store = stores.open_store(uri)
    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(desc='sync', unit='rows', file=sys.stderr)
    try:
        report = sync_run(store, directory, verify=verify, deep=deep, batch_rows=batch_rows,
                          progress=bar.update if bar else None)
    except SyncError as e:
        raise SyncFailed(f'{e}; the store still reflects its previous run') from e
    finally:
        if bar:
            bar.close()
        store.close()
    if verify:
        if not report.drift.none:
            raise DriftFound(f'{uri} differs from run {report.run_id}: {report.drift.line(report.run_id)}')
        LOG.info('%s holds run %s exactly (%d rows)', uri, report.run_id, report.unchanged)
    return report


def run(argv: Optional[Sequence[str]] = None) -> Report:
    """Runs the sync job; prints the report's line last."""
    logging.basicConfig(format='%(levelname)s %(name)s: %(message)s', stream=sys.stderr)
    LOG.setLevel(logging.INFO)
    args = parser().parse_args(argv)
    report = sync(args.index, args.to, args.verify, args.batch_rows, progress=not args.no_progress, deep=args.deep)
    if args.verify:
        print(f'no drift: {report.unchanged} rows of run {report.run_id}')
    else:
        print(report.line())
    return report


if __name__ == '__main__':
    from pipelines import cli

    sys.exit(cli.run_and_report('sync', run, sys.argv[1:]))
