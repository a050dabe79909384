"""Makes a store hold exactly the rows of a run: what to change comes from the store, never a local file.

A sync reads the store's chunk ids and row hashes, then streams the run's
chunks/ part by part: each new or changed row is upserted, in batches; rows
of the store the run lacks are deleted, last, so a reader never sees a chunk
vanish before its replacement is there. The store's marker moves to the run
only when every batch landed, and a batch that still fails after its
retries stops the sync with the ids it could not write. Whatever state a
store is in (empty, runs behind, a sync killed half-way, rows deleted or
added by hand), one sync leaves it equal to the run; a second writes
nothing. `deep` compares what the store holds, vectors included, instead of
its row hashes: it also finds rows whose text or vector was edited in the
store (`--verify` is always deep).

Memory: the store's ids with a hash each, one part of the run and one
batch, never the run's texts or vectors as a whole.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from typing import Callable, Optional

import pyarrow as pa

from transforms.output import publish, tables
from transforms.output.digests import check_files
from transforms.sync import rows
from transforms.sync.store import Store

LOG = logging.getLogger('ragsieve.sync')

DEFAULT_BATCH_ROWS = 1000
# Attempts of one batch and the waits between them; a batch that fails them all stops the sync.
ATTEMPTS = 3
BACKOFF_SECONDS = (0.5, 2.0)
# Examples of drifted ids a report shows.
EXAMPLES = 5
NO_MARKER = '(no marker)'


class SyncError(RuntimeError):
    """A batch failed after its retries; the store's marker still names the run it had."""

    def __init__(self, action: str, chunk_ids: list[str], cause: Exception):
        self.action, self.chunk_ids, self.cause = action, chunk_ids, cause
        more = len(chunk_ids) - EXAMPLES
        shown = ', '.join(chunk_ids[:EXAMPLES]) + (f' and {more} more' if more > 0 else '')
        why = (str(cause).strip().splitlines() or [''])[0][:300]
        super().__init__(f'{action} of {len(chunk_ids)} rows failed after {ATTEMPTS} attempts '
                         f'({type(cause).__name__}: {why}): {shown}')


@dataclasses.dataclass
class Drift:
    """How a store differs from a run: chunk ids missing from it, extra in it, or stale (other content)."""

    missing: list[str] = dataclasses.field(default_factory=list)
    extra: list[str] = dataclasses.field(default_factory=list)
    stale: list[str] = dataclasses.field(default_factory=list)
    # What the store's marker says when it does not name the run: its run id, or NO_MARKER.
    marker: Optional[str] = None

    @property
    def none(self) -> bool:
        return not (self.missing or self.extra or self.stale or self.marker)

    def line(self, run_id: str) -> str:
        """`3 missing (e.g. a#0, ...), 0 extra, 1 stale (e.g. b#2); marker names ...`."""
        counts = ', '.join(f'{len(ids)} {name}' + (f' (e.g. {", ".join(sorted(ids)[:EXAMPLES])})' if ids else '')
                           for name, ids in (('missing', self.missing), ('extra', self.extra), ('stale', self.stale)))
        marker = '' if self.marker is None else f'; the store\'s marker says {self.marker!r}, not {run_id!r}'
        return counts + marker


@dataclasses.dataclass
class Report:
    """What a sync did (or, with `verify`, would do)."""

    run_id: str
    upserted: int = 0
    deleted: int = 0
    unchanged: int = 0
    seconds: float = 0.0
    drift: Drift = dataclasses.field(default_factory=Drift)

    def line(self) -> str:
        return f'upserted {self.upserted}, deleted {self.deleted}, unchanged {self.unchanged} in {self.seconds:.1f} s'


def store_hashes(store: Store, batch_rows: int, deep: bool) -> dict[str, str]:
    """`{chunk_id: hash}` of every row the store holds: its row_hash, or (`deep`) a digest of its content."""
    found: dict[str, str] = {}
    columns = rows.CONTENT_COLUMNS if deep else ('chunk_id', rows.ROW_HASH)
    for table in store.scan(columns, batch_rows):
        digests = rows.content_digests(table) if deep else table.column(rows.ROW_HASH).to_pylist()
        found.update(zip(table.column('chunk_id').to_pylist(), digests))
    return found


def attempt(action: str, write: Callable[[], None], chunk_ids: Callable[[], list[str]],
            sleep: Callable[[float], None] = time.sleep) -> None:
    """Runs one batch write, retrying it; raises SyncError with the batch's ids when every attempt failed."""
    for number in range(ATTEMPTS):
        try:
            write()
            return
        except Exception as e:  # every client raises its own types; the last one is reported
            if number == ATTEMPTS - 1:
                raise SyncError(action, chunk_ids(), e) from e
            LOG.warning('%s failed (%s: %s); retrying', action, type(e).__name__, e)
            sleep(BACKOFF_SECONDS[min(number, len(BACKOFF_SECONDS) - 1)])


def sync_run(store: Store, index_dir: str, verify: bool = False, deep: bool = False,
             batch_rows: int = DEFAULT_BATCH_ROWS, progress: Optional[Callable[[int], None]] = None) -> Report:
    """Makes `store` hold exactly the rows of the built index at `index_dir` (one run).

    Args:
      store: The store, opened.
      index_dir: A run's directory (for a versioned root, the one LATEST names).
      verify: Only compute the drift, comparing content (deep); write nothing.
      deep: Compare what the store holds, vectors included, not its row hashes.
      batch_rows: Rows per upsert or delete, and per page read from the store.
      progress: Called with the rows of each part once it is handled.

    Returns:
      The report: counts written, and the drift found before writing.

    Raises:
      SyncError: When a batch fails after its retries.
      ValueError: When the run cannot be read.
    """
    started = time.perf_counter()
    deep = deep or verify
    run = rows.Run.of(index_dir)
    check_files(index_dir)  # the run holds the files its build wrote
    store.prepare(run.dim)
    publish.checkpoint('sync_prepared')
    held = store_hashes(store, batch_rows, deep)
    marker = store.read_marker()
    report = Report(run.run_id)
    drift = report.drift
    if (marker or {}).get('run_id') != run.run_id:
        drift.marker = (marker or {}).get('run_id') or NO_MARKER
    pending = _Upserts(store, batch_rows, report)
    for path in run.part_paths():
        # One part at a time; without `deep`, its vectors are read only if a row of it changed.
        part = tables.read_part(path, rows.CONTENT_COLUMNS if deep else rows.FIELDS)
        ids = part.column('chunk_id').to_pylist()
        digests = rows.content_digests(part) if deep else rows.row_hashes(part, run.vectors_id)
        changed = []
        for i, (chunk_id, digest) in enumerate(zip(ids, digests)):
            was = held.pop(chunk_id, None)
            if was == digest:
                report.unchanged += 1
                continue
            (drift.missing if was is None else drift.stale).append(chunk_id)
            changed.append(i)
        if changed and not verify:
            picked = part.take(pa.array(changed, pa.int64()))
            if not deep:
                vectors = tables.read_part(path, ['embedding']).column('embedding').take(pa.array(changed, pa.int64()))
                picked = picked.append_column('embedding', vectors)
            pending.add(rows.run_rows(picked, run))
        if progress:
            progress(part.num_rows)
    pending.flush()
    drift.extra = sorted(held)
    if not verify:
        for start in range(0, len(drift.extra), batch_rows):
            ids = drift.extra[start:start + batch_rows]
            attempt('delete', lambda ids=ids: store.delete(ids), lambda ids=ids: ids)
            report.deleted += len(ids)
            publish.checkpoint(f'sync_deleted_{start // batch_rows}')
        if not drift.none:
            store.write_marker({'run_id': run.run_id, 'rows': run.rows})
        publish.checkpoint('sync_marked')
    report.seconds = time.perf_counter() - started
    return report


class _Upserts:
    """Changed rows gathered across parts into full batches: one store write per `batch_rows` rows."""

    def __init__(self, store: Store, batch_rows: int, report: Report):
        self._store, self._batch_rows, self._report = store, batch_rows, report
        self._tables: list[pa.Table] = []
        self._rows = 0
        self._written = itertools.count()

    def add(self, table: pa.Table) -> None:
        self._tables.append(table)
        self._rows += table.num_rows
        while self._rows >= self._batch_rows:
            self._write(self._batch_rows)

    def flush(self) -> None:
        while self._rows:
            self._write(self._rows)

    def _write(self, size: int) -> None:
        held = pa.concat_tables(self._tables)
        batch, rest = held.slice(0, size), held.slice(size)
        attempt('upsert', lambda: self._store.upsert(batch), lambda: batch.column('chunk_id').to_pylist())
        publish.checkpoint(f'sync_upserted_{next(self._written)}')
        self._report.upserted += batch.num_rows
        self._tables, self._rows = [rest], rest.num_rows
