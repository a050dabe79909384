"""Makes a store hold exactly the rows of a run: what to change comes from the store, never a local file.

A sync reads the store's chunk ids and row hashes, then streams the run's
chunks/ part by part: each new or changed row is upserted, in batches; rows
of the store the run lacks are deleted, last, so a reader never sees a chunk
vanish before its replacement is there. The store's own consistency is part
of what it is compared on: an id held twice, a row without an id or without
a vector, a marker that is not ragsieve's are drift, which a sync repairs.
The store's marker moves to the run only when every batch landed, and a
batch that still fails after its retries (each after `Store.recover`)
stops the sync with the ids it could not write. A row the store cannot hold
(`Store.unholdable`: a NUL in PostgreSQL text, an id over an index's
limit) is rejected on its own, with its reason, and the rest is written.
Whatever state a store is in, one sync leaves it equal to the run (less
its rejected rows); a second writes nothing. `deep` compares what the store
holds, vectors included, instead of its row hashes (`--verify` is always deep).

Cost: rows are compared on their ids and hashes first; only the rows that
are written have their vectors read (`vectors.RunVectors`). Memory: the
store's ids with a hash each, one part of the run's fields, the vectors of
its rows to write and one batch; never the run's texts or vectors as a whole.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import time
from typing import Any, Callable, Optional, Sequence

import pyarrow as pa

from transforms.output import publish, tables
from transforms.sync import rows
from transforms.sync.store import LockLost, Store, StoreError, first_line, shown_id
from transforms.sync.vectors import RunVectors

LOG = logging.getLogger('ragsieve.sync')

DEFAULT_BATCH_ROWS = 1000
# What a batch may hold: a sync holds one batch of rows, vectors included.
MAX_BATCH_ROWS = 100_000
# Rows per page of ids and hashes read from a store (small whatever the rows' size: two short strings).
HASH_PAGE_ROWS = 50_000
# The counts `sync_run` reports to its progress callback.
COMPARED, UPSERTED, DELETED = 'compared', 'upserted', 'deleted'
# Attempts of one batch and the waits between them; a batch that fails them all stops the sync.
ATTEMPTS = 3
BACKOFF_SECONDS = (0.5, 2.0)
# Examples of drifted ids a line shows.
EXAMPLES = 5
NO_MARKER = '(no marker)'
FOREIGN_MARKER = 'not ragsieve\'s: '


def examples(chunk_ids: Sequence) -> str:
    """`a#0, b#1 and 3 more`: a few ids, escaped and bounded, whatever their number and size."""
    more = len(chunk_ids) - EXAMPLES
    return ', '.join(shown_id(c) for c in list(chunk_ids)[:EXAMPLES]) + (f' and {more} more' if more > 0 else '')


class SyncError(RuntimeError):
    """A batch failed after its retries; the store's marker still names the run it had."""

    def __init__(self, action: str, chunk_ids: list[str], cause: Exception, attempts: int = ATTEMPTS,
                 redact: Callable[[str], str] = str):
        self.action, self.chunk_ids, self.cause = action, chunk_ids, cause
        ids = f': {examples(chunk_ids)}' if chunk_ids else ''
        super().__init__(f'{action} of {len(chunk_ids)} rows failed after {attempts} attempts '
                         f'({type(cause).__name__}: {first_line(cause, redact)}){ids}')


@dataclasses.dataclass
class Drift:
    """How a store differs from a run: ids missing, extra, stale (other content), held twice or NULL; its marker."""

    missing: list[str] = dataclasses.field(default_factory=list)
    extra: list[str] = dataclasses.field(default_factory=list)
    stale: list[str] = dataclasses.field(default_factory=list)
    duplicates: list[str] = dataclasses.field(default_factory=list)
    null_keys: int = 0
    # What the store's marker says when it does not name the run: its run id, NO_MARKER or FOREIGN_MARKER...
    marker: Optional[str] = None

    @property
    def none(self) -> bool:
        return not (self.missing or self.extra or self.stale or self.duplicates or self.null_keys or self.marker)

    def line(self, run_id: str) -> str:
        """`3 missing (e.g. a#0, ...), 0 extra, 1 stale (e.g. b#2); the store's marker says ...`."""
        counts = ', '.join(f'{len(ids)} {name}' + (f' (e.g. {examples(sorted(ids))})' if ids else '')
                           for name, ids in (('missing', self.missing), ('extra', self.extra), ('stale', self.stale)))
        if self.duplicates:
            counts += f', {len(self.duplicates)} held more than once (e.g. {examples(sorted(self.duplicates))})'
        if self.null_keys:
            counts += f', {self.null_keys} without a chunk_id'
        if self.marker is None:
            return counts
        if self.marker == NO_MARKER:
            return counts + '; the store holds no marker'
        if self.marker.startswith(FOREIGN_MARKER):
            return counts + f'; the store\'s marker is {self.marker}'
        return counts + f'; the store\'s marker says {shown_id(self.marker)!r}, not {run_id!r}'


@dataclasses.dataclass
class Report:
    """What a sync did (or, with `verify`, would do)."""

    run_id: str
    upserted: int = 0
    deleted: int = 0
    unchanged: int = 0
    seconds: float = 0.0
    drift: Drift = dataclasses.field(default_factory=Drift)
    # (chunk_id, why) of the run's rows the store cannot hold: not written.
    rejected: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        rejected = f', rejected {len(self.rejected)}' if self.rejected else ''
        return (f'upserted {self.upserted}, deleted {self.deleted}, unchanged {self.unchanged}{rejected} '
                f'in {self.seconds:.1f} s')

    def rejected_line(self) -> str:
        """`2 rows the store cannot hold were not written: a#0 (why), ...`, bounded."""
        shown = '; '.join(f'{shown_id(c)} ({why})' for c, why in self.rejected[:EXAMPLES])
        more = len(self.rejected) - EXAMPLES
        return (f'{len(self.rejected)} rows of run {self.run_id} the store cannot hold were not written: {shown}'
                + (f'; and {more} more' if more > 0 else ''))


@dataclasses.dataclass
class Held:
    """What a store holds: `{chunk_id: hash}` (None for a row without a vector), ids held twice, rows without one.

    While the run streams, `seen` gathers its ids (less those the store
    cannot hold): what the store holds besides them is extra.
    """

    hashes: dict = dataclasses.field(default_factory=dict)
    duplicates: set = dataclasses.field(default_factory=set)
    null_keys: int = 0
    seen: set = dataclasses.field(default_factory=set)

    def add(self, chunk_ids: list, digests: list) -> None:
        """Adds a page of the store's rows; dict and set operations, a loop only where an id repeats."""
        pairs = dict(zip(chunk_ids, digests))
        if len(pairs) == len(chunk_ids) and None not in pairs and self.hashes.keys().isdisjoint(pairs):
            self.hashes.update(pairs)
            return
        for chunk_id, digest in zip(chunk_ids, digests):
            if chunk_id is None:
                self.null_keys += 1
            elif chunk_id in self.hashes:
                self.duplicates.add(chunk_id)
            else:
                self.hashes[chunk_id] = digest

    def extra(self) -> list[str]:
        """The ids the store holds that the run (as far as it streamed) does not, sorted."""
        return sorted(self.hashes.keys() - self.seen)


def read_store(store: Store, batch_rows: int, deep: bool) -> Held:
    """Every row the store holds: its row_hash, or (`deep`) a digest of its content."""
    held = Held()
    if deep:
        for table in store.scan(rows.CONTENT_COLUMNS, batch_rows):
            held.add(table.column('chunk_id').to_pylist(), rows.content_digests(table))
        return held
    for chunk_ids, row_hashes in store.scan_hashes(max(batch_rows, HASH_PAGE_ROWS)):
        held.add(chunk_ids, row_hashes)
    for chunk_id in store.null_vector_ids():
        if chunk_id in held.hashes:
            held.hashes[chunk_id] = None  # never a row's hash: rewritten
    return held


def marker_drift(marker: Any, run_id: str) -> Optional[str]:
    """None when the marker names the run; else the run it names, NO_MARKER, or FOREIGN_MARKER and what it holds."""
    if isinstance(marker, dict) and isinstance(marker.get('run_id'), str):
        return None if marker['run_id'] == run_id else marker['run_id']
    if marker is None:
        return NO_MARKER
    return FOREIGN_MARKER + shown_id(json.dumps(marker) if not isinstance(marker, str) else repr(marker))


def attempt(action: str, call: Callable[[], Any], chunk_ids: Callable[[], list[str]] = list,
            store: Optional[Store] = None, sleep: Callable[[float], None] = time.sleep,
            point: Optional[str] = None) -> Any:
    """Runs one store call, retrying it after `store.recover()`; returns what it returns.

    `point` names the checkpoint between the lock's check and the call (a
    test pauses the sync there: the store's fence, not the check, must
    then keep its write out).

    Raises:
      StoreError: From the call itself: a store that cannot be used as it is, not retried.
      SyncError: With the batch's ids, when every attempt failed or the sync lost its lock.
    """
    redact = store.redact if store else str
    for number in range(ATTEMPTS):
        try:
            if store:
                store.check_lock()  # a lock file deleted or replaced: another sync may be writing too
            if number and store:
                store.recover()
        except LockLost as e:
            raise SyncError(action, chunk_ids(), e, number, redact) from e
        except Exception as e:  # the server is not back yet: this attempt failed too
            error = e
        else:
            if point and not number:
                publish.checkpoint(point)
            try:
                return call()
            except LockLost as e:  # the store's fence kept the write out: another sync holds the store
                raise SyncError(action, chunk_ids(), e, number + 1, redact) from e
            except StoreError:
                raise
            except Exception as e:  # every client raises its own types; the last one is reported
                error = e
        if number == ATTEMPTS - 1:
            raise SyncError(action, chunk_ids(), error, ATTEMPTS, redact) from error
        LOG.warning('%s failed (%s: %s); retrying', action, type(error).__name__, first_line(error, redact))
        sleep(BACKOFF_SECONDS[min(number, len(BACKOFF_SECONDS) - 1)])


def sync_run(store: Store, run: rows.Run, verify: bool = False, deep: bool = False,
             batch_rows: int = DEFAULT_BATCH_ROWS, progress: Optional[Callable[[str, int], None]] = None) -> Report:
    """Makes `store` hold exactly the rows of `run` (checked by `run_check.checked_run`).

    Args:
      store: The store, its lock held unless `verify`.
      run: The run, its parts' rows counted.
      verify: Only compute the drift, comparing content (deep); write nothing.
      deep: Compare what the store holds, vectors included, not its row hashes.
      batch_rows: Rows per upsert or delete, and per page read from the store.
      progress: Called as `progress(key, rows)` with `COMPARED` and the rows of
        each part once compared, `UPSERTED` and `DELETED` and the rows of each
        batch once written.

    Returns:
      The report: counts written, rows rejected, and the drift found before writing.

    Raises:
      SyncError: When a batch fails after its retries.
      StoreError: When the store's schema is not ragsieve's.
      ValueError: When a part of the run changed since it was checked.
    """
    started = time.perf_counter()
    deep = deep or verify
    exists = store.prepare(run.dim, create=not verify)
    publish.checkpoint('sync_prepared')
    held = attempt('read', lambda: read_store(store, batch_rows, deep), store=store) if exists else Held()
    marker = attempt('read marker', store.read_marker, store=store) if exists else None
    report = Report(run.run_id)
    drift = report.drift
    drift.marker = marker_drift(marker, run.run_id)
    drift.duplicates, drift.null_keys = sorted(held.duplicates), held.null_keys
    if not verify:
        _repair(store, held, batch_rows)
    _stream(store, run, held, report, None if verify else _Upserts(store, batch_rows, report, progress), deep,
            progress)
    drift.extra = held.extra()
    if not verify:
        _finish(store, run, report, batch_rows, progress)
    report.seconds = time.perf_counter() - started
    return report


def _stream(store: Store, run: rows.Run, held: Held, report: Report, pending: Optional['_Upserts'], deep: bool,
            progress: Optional[Callable[[str, int], None]]) -> None:
    """Compares the run's parts with what the store holds, in order; hands the rows to write to `pending`."""
    vectors = None if deep or pending is None else RunVectors(run)
    for number, path in enumerate(run.part_paths()):
        # One part at a time; without `deep`, only the vectors of its rows to write are read.
        part = tables.read_part(path, rows.CONTENT_COLUMNS if deep else rows.FIELDS)
        if run.part_rows and part.num_rows != run.part_rows[number]:
            raise ValueError(f'{path} changed while syncing ({part.num_rows} rows, {run.part_rows[number]} '
                             'when checked): nothing was deleted; sync again')
        write = _compare(part, held, report, store, run.vectors_id, deep)
        if write and pending is not None:
            picked = part.take(pa.array(write, pa.int64()))
            if vectors is not None:
                picked = picked.append_column('embedding', vectors.read(number, path, write))
            pending.add(rows.run_rows(picked, run))
        if progress:
            progress(COMPARED, part.num_rows)
    if pending is not None:
        pending.flush()


def _compare(part: pa.Table, held: Held, report: Report, store: Store, vectors_id: str, deep: bool) -> list[int]:
    """The positions of the part's rows to write; counts the others, unchanged or rejected (`Store.unholdable`)."""
    ids = part.column('chunk_id').to_pylist()
    digests = rows.content_digests(part) if deep else rows.row_hashes(part, vectors_id)
    stored = held.hashes.get
    changed = [i for i, (chunk_id, digest) in enumerate(zip(ids, digests)) if stored(chunk_id) != digest]
    report.unchanged += len(ids) - len(changed)
    held.seen.update(ids)
    if not changed:
        return []
    why = store.unholdable(part.select(list(rows.FIELDS)).take(pa.array(changed, pa.int64())))
    write = []
    for i, reason in zip(changed, why):
        if reason:
            # Not seen: a row of an earlier run under its id is extra now, and deleted.
            report.rejected.append((ids[i], reason))
            held.seen.discard(ids[i])
            continue
        (report.drift.missing if ids[i] not in held.hashes else report.drift.stale).append(ids[i])
        write.append(i)
    return write


def _repair(store: Store, held: Held, batch_rows: int) -> None:
    """Deletes rows without an id, and every copy of an id held twice (the run's row is then missing, and upserted)."""
    if held.null_keys:
        attempt('delete of rows without a chunk_id', store.delete_null_keys, store=store)
    duplicated = sorted(held.duplicates)
    for start in range(0, len(duplicated), batch_rows):
        ids = duplicated[start:start + batch_rows]
        attempt('delete of duplicated ids', lambda ids=ids: store.delete(ids), lambda ids=ids: ids, store=store)
    for chunk_id in duplicated:
        del held.hashes[chunk_id]


def _finish(store: Store, run: rows.Run, report: Report, batch_rows: int,
            progress: Optional[Callable[[str, int], None]]) -> None:
    """Deletes the extra rows, moves the marker, then keeps the table up (compaction, statistics)."""
    drift = report.drift
    for start in range(0, len(drift.extra), batch_rows):
        ids = drift.extra[start:start + batch_rows]
        attempt('delete', lambda ids=ids: store.delete(ids), lambda ids=ids: ids, store=store,
                point=f'sync_deleting_{start // batch_rows}')
        report.deleted += len(ids)
        if progress:
            progress(DELETED, len(ids))
        publish.checkpoint(f'sync_deleted_{start // batch_rows}')
    held = run.rows - len(report.rejected)
    if not drift.none:
        marker = {'run_id': run.run_id, 'rows': held, 'rejected': len(report.rejected)}
        attempt('marker', lambda: store.write_marker(marker), store=store, point='sync_marking')
    publish.checkpoint('sync_marked')
    if drift.none:
        return  # nothing written
    try:
        store.upkeep(report.upserted + report.deleted, held)
    except Exception as e:  # the store is synced and marked: its upkeep waits for the next sync
        LOG.warning('%s: upkeep after the sync failed (%s: %s)', store.shown, type(e).__name__,
                    first_line(e, store.redact))


class _Upserts:
    """Changed rows gathered across parts into full batches: one store write per `batch_rows` rows."""

    def __init__(self, store: Store, batch_rows: int, report: Report,
                 progress: Optional[Callable[[str, int], None]] = None):
        self._store, self._batch_rows, self._report, self._progress = store, batch_rows, report, progress
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
        number = next(self._written)
        attempt('upsert', lambda: self._store.upsert(batch), lambda: batch.column('chunk_id').to_pylist(),
                store=self._store, point=f'sync_upserting_{number}')
        publish.checkpoint(f'sync_upserted_{number}')
        self._report.upserted += batch.num_rows
        if self._progress:
            self._progress(UPSERTED, batch.num_rows)
        self._tables, self._rows = [rest], rest.num_rows
