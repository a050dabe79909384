"""Sync job: make a vector store hold exactly the kept rows of a published run.

`ragsieve sync --index ROOT --to lancedb://PATH` (or `postgresql://...`,
`milvus://...`) syncs the run LATEST names (or a plain build's directory),
once the run is checked and while it holds the store's lock (a second sync
is refused, or waits with `--wait`); `--verify` only reports drift. The last
line says what was written: `upserted N, deleted N, unchanged N in S s`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from typing import Optional, Sequence

from pipelines.common import progress as progress_view
from pipelines.common.progress_meters import Meter
from pipelines.common.exits import DRIFT, SYNC_FAILED, say
from transforms.output import snapshots
from transforms.output.digests import check_files
from transforms.sync import run_check
from transforms.sync import store as stores
from transforms.sync.sync import (
    COMPARED,
    DEFAULT_BATCH_ROWS,
    DELETED,
    HASH_PAGE_ROWS,
    MAX_BATCH_ROWS,
    UPSERTED,
    Report,
    SyncError,
    sync_run,
)

LOG = logging.getLogger('ragsieve.sync')


class DriftFound(Exception):
    """`--verify` found the store differs from the run."""

    exit_code = DRIFT


class SyncFailed(Exception):
    """A batch failed after its retries: the store is behind, its marker unchanged; or the sync lost its lock."""

    exit_code = SYNC_FAILED


def lost_lock_line(store: stores.Store, lost: stores.LockLost) -> str:
    """The line of a sync that lost its lock: what the store's fence (`Store.FENCED`) kept out from then on."""
    reason = stores.first_line(lost, store.redact).removeprefix(f'{store.shown}: ')
    if not store.FENCED:
        return (f'{store.shown}: this sync lost its lock ({reason}) and stops; this store has no conditional write, '
                'so a write under way then may have landed: sync again')
    return (f'{store.shown}: this sync lost its lock ({reason}); nothing was written after that, and the store is '
            'left to the sync that holds it now')


def parser() -> argparse.ArgumentParser:
    """The sync flags."""
    p = argparse.ArgumentParser(prog='ragsieve sync', description='Sync a published run into a vector store.')
    p.add_argument('--index', type=str, required=True,
                   help='A versioned root (its LATEST run is synced) or a plain build\'s directory.')
    p.add_argument('--to', type=str, required=True,
                   help='The store: lancedb://PATH, postgresql://USER@HOST:PORT/DB or milvus://PATH.db, with '
                        f'?table=NAME (default {stores.DEFAULT_TABLE}); LanceDB also takes ?keep_versions=N.')
    p.add_argument('--verify', action='store_true',
                   help=f'Only report rows missing from, extra in, stale in or duplicated in the store, comparing '
                        f'what it holds, vectors included (exit {DRIFT} if any). Writes nothing and takes no lock.')
    p.add_argument('--deep', action='store_true',
                   help='Compare what the store holds, vectors included, rather than its row hashes: also '
                        'repairs rows edited in the store by hand (reads every row of the store).')
    p.add_argument('--wait', type=float, default=0.0,
                   help='Seconds to wait for another sync of the same store to finish; by default a second sync '
                        'is refused at once, naming the one that holds the store.')
    p.add_argument('--batch_rows', type=int, default=DEFAULT_BATCH_ROWS,
                   help=f'Rows per upsert, per delete and per page of rows read from the store with their '
                        f'vectors (1 to {MAX_BATCH_ROWS}; ids and hashes are read {HASH_PAGE_ROWS:,} at a time).')
    progress_view.add_flags(p)
    p.add_argument('--no_progress', action='store_true', help='The same as --progress none.')
    return p


def meters(rows: int, verify: bool) -> list[Meter]:
    """A sync's meters: the run's rows compared with the store, then (unless `verify`) rows upserted and deleted."""
    compare = Meter('compare', COMPARED, 'rows', total=rows, rate=True)
    if verify:
        return [compare]
    return [compare, Meter('upsert', UPSERTED, 'rows'), Meter('delete', DELETED, 'rows')]


def sync(index: str, uri: str, verify: bool = False, batch_rows: int = DEFAULT_BATCH_ROWS,
         view: Optional[progress_view.View] = None, deep: bool = False, wait: float = 0.0) -> Report:
    """Syncs (or verifies) the run `index` resolves to into the store at `uri`; returns the report.

    The run is checked before the store is opened; a sync (not `verify`)
    holds the store's lock while it reads and writes it. `view`, a started
    `progress.View`, shows the steps and the rows compared, upserted and
    deleted.

    Raises:
      ValueError: For a bad URI or flag, a missing client library, a damaged
        run, a store whose schema is not ragsieve's, or one another sync holds.
      DriftFound: With `verify`, when the store differs from the run.
      SyncFailed: When a batch failed after its retries, or the sync lost its lock.
    """
    if not 1 <= batch_rows <= MAX_BATCH_ROWS:
        raise ValueError(f'--batch_rows must be 1 to {MAX_BATCH_ROWS}, got {batch_rows}')
    if not wait >= 0:
        raise ValueError(f'--wait must be >= 0 seconds, got {wait}')
    view = view or progress_view.View(progress_view.NONE)
    with view.step('check run') as step:
        directory = snapshots.resolve_index(index)
        check_files(directory)  # the run holds the files its build wrote
        run = run_check.checked_run(directory)
        step.detail = f'{run.run_id}, {run.rows:,} rows'
    with view.step('open store', stores.masked(uri)):
        store = stores.open_store(uri)
    try:
        with contextlib.ExitStack() as held:
            if not verify:
                with view.step('lock store'):
                    held.enter_context(store.lock(wait, f'run {run.run_id}'))
            view.show(meters(run.rows, verify))
            report = sync_run(store, run, verify=verify, deep=deep, batch_rows=batch_rows, progress=view.add)
            view.finish()
    except SyncError as e:
        if isinstance(e.cause, stores.LockLost):
            raise SyncFailed(lost_lock_line(store, e.cause)) from e
        raise SyncFailed(f'{store.shown}: {e}; the store still reflects its previous run') from e
    except stores.LockLost as e:
        raise SyncFailed(lost_lock_line(store, e)) from e
    except ValueError as e:
        if not store.secrets:
            raise
        raise ValueError(store.redact(str(e))) from None
    finally:
        store.close()
    if report.rejected:
        LOG.warning('%s', report.rejected_line())
    if verify:
        if not report.drift.none:
            raise DriftFound(f'{store.shown} differs from run {report.run_id}: {report.drift.line(report.run_id)}')
        LOG.info('%s holds run %s exactly (%d rows)', store.shown, report.run_id, report.unchanged)
    return report


def sync_published(index: str, uri: str, run_id: str, view: Optional[progress_view.View] = None) -> Report:
    """`build --sync`: syncs the run just published; any failure says the run is published (exit 4).

    Raises:
      SyncFailed: Whatever kept the sync from finishing (a store that cannot
        be reached, another sync holding it, a batch that failed).
    """
    try:
        return sync(index, uri, view=view)
    except (SyncFailed, ValueError, OSError) as e:
        raise SyncFailed(f'run {run_id} is published, but its sync into {stores.masked(uri)} failed: {e}') from e


def run(argv: Optional[Sequence[str]] = None) -> Report:
    """Runs the sync job; prints the report's line last."""
    logging.basicConfig(format='%(levelname)s %(name)s: %(message)s', stream=sys.stderr)
    LOG.setLevel(logging.INFO)
    args = parser().parse_args(argv)
    mode = progress_view.NONE if args.no_progress else args.progress
    with progress_view.View(mode, args.progress_interval, LOG) as view:
        report = sync(args.index, args.to, args.verify, args.batch_rows, view, deep=args.deep, wait=args.wait)
    if args.verify:
        rejected = f' ({len(report.rejected)} more it cannot hold)' if report.rejected else ''
        say(f'no drift: {report.unchanged} rows of run {report.run_id}{rejected}')
    else:
        say(report.line())  # synced: printing it cannot change that
    return report


if __name__ == '__main__':
    from pipelines.common.failures import run_and_report

    sys.exit(run_and_report('sync', run, sys.argv[1:]))
