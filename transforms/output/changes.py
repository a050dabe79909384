"""What changed between two builds: documents, chunks, and kept/dropped decisions."""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Optional


from transforms import storage
from transforms.output import tables
from transforms.text import text_key

# Ids listed per category in diff.json; the counts are always complete.
MAX_LISTED = 100


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


def load_state(directory: str) -> BuildState:
    """Reads the documents/, chunks/ and dropped/ tables of a finished build.

    Parts are read one at a time and texts reduced to their hashes, so the
    state holds ids and hashes, never the chunk texts.

    Raises:
      ValueError: Naming the part that cannot be read (see `state_problem`).
    """
    documents = {}
    # Builds from before documents/ existed report no document changes.
    for part in _parts(directory, tables.DOCUMENTS_DIR, ['doc_id', 'text_key']):
        documents.update(zip(part.column('doc_id').to_pylist(), part.column('text_key').to_pylist()))
    chunks = {}
    for name, kept in ((tables.CHUNKS_DIR, True), (tables.DROPPED_DIR, False)):
        for part in _parts(directory, name, ['chunk_id', 'text']):
            for chunk_id, text in zip(part.column('chunk_id').to_pylist(), part.column('text').to_pylist()):
                chunks[(chunk_id, text_key(text))] = kept
    return BuildState(documents=documents, chunks=chunks)


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
