"""What changed between two builds: documents, chunks, and kept/dropped decisions."""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import os
import pickle
import posixpath
import tempfile
from collections import defaultdict
from typing import Iterator, Optional

import pyarrow.parquet as pq

from transforms import storage
from transforms.hashing import stable_hash
from transforms.output import tables
from transforms.text import text_key

# Ids listed per category in diff.json; the counts are always complete.
MAX_LISTED = 100

# Rows (of both builds, all three tables) a bucket of `diff_builds` holds, about: its memory, whatever the corpus.
BUCKET_ROWS = 100_000
# Keys the bucket hash, so buckets do not follow the tables' shards.
_BUCKET_PERSON = b'ragsieve-diff'


@dataclasses.dataclass(frozen=True)
class BuildState:
    """The parts of a build's output a change report compares.

    Attributes:
      documents: doc_id -> text_key of the indexed documents.
      chunks: (chunk_id, text_key) -> True when kept, False when dropped.
    """

    documents: dict[str, str]
    chunks: dict[tuple[str, str], bool]


def _parts(directory: str, name: str, columns: list[str]):
    """The parts of one table, one at a time; nothing for a table the build did not write."""
    path = posixpath.join(directory, name)
    if not storage.has_files(path):
        return iter(())
    return tables.iter_parts(path, columns)


# The tables `load_state` reads, with their columns; a build before documents/ existed lacks that one.
STATE_TABLES = ((tables.DOCUMENTS_DIR, ('doc_id', 'text_key')), (tables.CHUNKS_DIR, ('chunk_id', 'text')),
                (tables.DROPPED_DIR, ('chunk_id', 'text')))
OPTIONAL_TABLES = (tables.DOCUMENTS_DIR,)


def state_problem(directory: str) -> Optional[str]:
    """Why `load_state` could not read a finished build, in one line naming the file, or None.

    Checked before a build runs (`tables.table_problem`: footers only), so
    that a damaged previous build is known, and left aside, up front.
    """
    for name, columns in STATE_TABLES:
        path = posixpath.join(directory, name)
        if name in OPTIONAL_TABLES and not storage.has_files(path):
            continue
        problem = tables.table_problem(path, columns)
        if problem:
            return problem
    return None


def state_parts(directory: str) -> Iterator[tuple[Optional[bool], list[tuple[str, str]]]]:
    """A finished build's state, one table part at a time, in the order `load_state` reads it.

    Yields:
      `(None, [(doc_id, text_key)])` for a part of documents/, then
      `(kept, [(chunk_id, text_key(text))])` for those of chunks/ (kept
      True) and dropped/ (False).

    Raises:
      ValueError: Naming the part that cannot be read (see `state_problem`).
    """
    # Builds from before documents/ existed report no document changes.
    for part in _parts(directory, tables.DOCUMENTS_DIR, ['doc_id', 'text_key']):
        yield None, list(zip(part.column('doc_id').to_pylist(), part.column('text_key').to_pylist()))
    for name, kept in ((tables.CHUNKS_DIR, True), (tables.DROPPED_DIR, False)):
        for part in _parts(directory, name, ['chunk_id', 'text']):
            texts = part.column('text').to_pylist()
            yield kept, list(zip(part.column('chunk_id').to_pylist(), map(text_key, texts)))


def _add_part(state: BuildState, kept: Optional[bool], rows: list[tuple[str, str]]) -> None:
    # A later row of the same key wins, as it did when the state was one dict per table.
    if kept is None:
        state.documents.update(rows)
    else:
        state.chunks.update((row, kept) for row in rows)


def load_state(directory: str) -> BuildState:
    """Reads the documents/, chunks/ and dropped/ tables of a finished build.

    Parts are read one at a time and texts reduced to their hashes, so the
    state holds ids and hashes, never the chunk texts; but every chunk's:
    `diff_builds` compares two builds holding a bucket of them at a time.

    Raises:
      ValueError: Naming the part that cannot be read (see `state_problem`).
    """
    state = BuildState(documents={}, chunks={})
    for kept, rows in state_parts(directory):
        _add_part(state, kept, rows)
    return state


def _listed(ids) -> dict:
    ids = sorted(ids)
    return {'count': len(ids), 'ids': ids[:MAX_LISTED]}


def diff_states(old: Optional[BuildState], new: BuildState) -> dict:
    """Documents added/removed/changed, chunks added/removed, and decisions that flipped.

    A chunk is identified by its id and exact text, so an edited chunk counts
    as one removed and one added. `old=None` (a first build) reports
    everything as added.
    """
    old = old or BuildState({}, {})
    docs_old, docs_new = set(old.documents), set(new.documents)
    changed = {d for d in docs_old & docs_new if old.documents[d] != new.documents[d]}
    common = set(old.chunks) & set(new.chunks)
    return {
        'documents': {
            'before': len(docs_old),
            'after': len(docs_new),
            'added': _listed(docs_new - docs_old),
            'removed': _listed(docs_old - docs_new),
            'changed': _listed(changed),
            'unchanged': len(docs_old & docs_new) - len(changed),
        },
        'chunks': {
            'before': len(old.chunks),
            'after': len(new.chunks),
            'added': _listed(c for c, _ in set(new.chunks) - set(old.chunks)),
            'removed': _listed(c for c, _ in set(old.chunks) - set(new.chunks)),
            'unchanged': len(common),
        },
        'kept': {
            'before': sum(old.chunks.values()),
            'after': sum(new.chunks.values()),
            'newly_dropped': _listed(c for c, t in common if old.chunks[(c, t)] and not new.chunks[(c, t)]),
            'newly_kept': _listed(c for c, t in common if not old.chunks[(c, t)] and new.chunks[(c, t)]),
        },
    }


class PreviousUnreadable(ValueError):
    """The previous build's rows cannot be read, though its footers could (`state_problem`)."""


def diff_builds(old: Optional[str], new: str, bucket_rows: int = BUCKET_ROWS) -> dict:
    """`diff_states(load_state(old), load_state(new))`, in memory bounded by a bucket of rows, not by the builds.

    Each table part of both builds is read once and its rows routed, by a
    stable hash of their id, to one of K bucket files on local disk (K from
    the tables' row counts, so that a bucket holds about `bucket_rows`
    rows). A document or chunk lands in the same bucket in both builds, so
    the buckets are compared one at a time with `diff_states` and their
    reports merged: counts summed, and the MAX_LISTED smallest ids of all
    listed, which are among the MAX_LISTED smallest of their bucket.

    Args:
      old: The previous build's directory; None for a first build.
      new: This build's directory.
      bucket_rows: Rows a bucket holds, about.

    Raises:
      PreviousUnreadable: Naming the part of `old` that cannot be read; it
        is read before `new`.
      ValueError: Naming the part of `new` that cannot be read.
    """
    if bucket_rows < 1:
        raise ValueError(f'bucket_rows must be >= 1, got {bucket_rows}')
    with tempfile.TemporaryDirectory(prefix='ragsieve-diff-') as scratch:
        try:
            old_rows = state_rows(old) if old else 0
        except ValueError as e:
            raise PreviousUnreadable(str(e)) from e
        buckets = max(1, -(-(old_rows + state_rows(new)) // bucket_rows))
        if old:
            try:
                _route(old, os.path.join(scratch, 'old'), buckets)
            except ValueError as e:
                raise PreviousUnreadable(str(e)) from e
        _route(new, os.path.join(scratch, 'new'), buckets)
        return functools.reduce(merge_reports, (
            diff_states(_read_bucket(os.path.join(scratch, 'old'), b), _read_bucket(os.path.join(scratch, 'new'), b))
            for b in range(buckets)))


def state_rows(directory: str) -> int:
    """Rows of a build's documents/, chunks/ and dropped/ tables, from their parts' footers (a few KB each)."""
    return sum(tables.load_file(path, _footer_rows)
               for name, _ in STATE_TABLES if storage.has_files(posixpath.join(directory, name))
               for path in tables.part_paths(posixpath.join(directory, name)))


def _footer_rows(path: str) -> int:
    with storage.open_read(path) as f:
        return pq.ParquetFile(f).metadata.num_rows


def bucket_of(row_id: str, buckets: int) -> int:
    """The bucket of a doc_id or chunk_id: the same in both builds, so each bucket is compared alone."""
    return stable_hash(row_id, person=_BUCKET_PERSON) % buckets


def _route(directory: str, prefix: str, buckets: int) -> None:
    """Appends each part's rows to the files `{prefix}-{bucket}`, one pickled `(kept, rows)` per part and bucket.

    A file is opened per part it gets rows of, so that K buckets need not be
    K open files.
    """
    for kept, rows in state_parts(directory):
        routed = defaultdict(list)
        for row in rows:
            routed[bucket_of(row[0], buckets)].append(row)
        for bucket, its_rows in routed.items():
            with open(f'{prefix}-{bucket:05d}', 'ab') as f:
                pickle.dump((kept, its_rows), f, protocol=pickle.HIGHEST_PROTOCOL)


def _read_bucket(prefix: str, bucket: int) -> BuildState:
    """One bucket of a build's state, its parts in the order they were routed."""
    state = BuildState(documents={}, chunks={})
    path = f'{prefix}-{bucket:05d}'
    if not os.path.exists(path):
        return state
    with open(path, 'rb') as f:
        while True:
            try:
                kept, rows = pickle.load(f)  # our own scratch file, written above
            except EOFError:
                return state
            _add_part(state, kept, rows)


def merge_reports(a: dict, b: dict) -> dict:
    """Two `diff_states` reports of disjoint ids as one: counts summed, the MAX_LISTED smallest ids of both."""
    if set(a) == {'count', 'ids'}:
        return {'count': a['count'] + b['count'], 'ids': list(itertools.islice(heapq.merge(a['ids'], b['ids']),
                                                                             MAX_LISTED))}
    return {key: merge_reports(value, b[key]) if isinstance(value, dict) else value + b[key]
            for key, value in a.items()}


def summary_line(report: dict) -> str:
    """One log line of a change report."""
    docs, chunks, kept = report['documents'], report['chunks'], report['kept']
    cache = report.get('cache') or {}
    computed = ', '.join(
        f"{feature} {c['computed']} computed / {c['hits']} cached" for feature, c in sorted(cache.items()))
    return (
        f"Changes since {report.get('previous_run') or 'nothing'}: documents "
        f"+{docs['added']['count']} -{docs['removed']['count']} ~{docs['changed']['count']}; "
        f"chunks +{chunks['added']['count']} -{chunks['removed']['count']}; "
        f"kept {kept['before']} → {kept['after']} "
        f"({kept['newly_dropped']['count']} newly dropped, {kept['newly_kept']['count']} newly kept)"
        + (f'; {computed}' if computed else '')
    )
