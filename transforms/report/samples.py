"""Bounded samples of a run's tables for its report: a few rows per group, read part by part.

Each sample keeps, per group (a rejection reason, a filter's drop reason),
the rows whose chunk id (or source) hashes lowest: a spread over the whole
corpus that does not depend on the sharding, held in a heap of `n` rows per
group while the parts stream by. Nothing holds a whole table.
"""

from __future__ import annotations

import heapq
import posixpath
from typing import Callable, Iterable, Iterator, Optional, Sequence

import pyarrow as pa

from transforms import storage
from transforms.hashing import stable_hash
from transforms.output import tables

_SAMPLE_PERSON = b'ragsieve-report'
# Characters of a text shown in the report; the rest is cut with an ellipsis.
MAX_TEXT_CHARS = 1200


def rank(key: str) -> int:
    """A row's place in a sample: a stable hash, so the same run gives the same sample."""
    return stable_hash(key, person=_SAMPLE_PERSON)


def rows_of(parts: Iterable[pa.Table]) -> Iterator[dict]:
    """The rows of the parts, one part in memory at a time."""
    for part in parts:
        yield from part.to_pylist()


def sample_by(rows: Iterable[dict], group: Callable[[dict], Optional[str]], key: Callable[[dict], str],
              n: int) -> dict[str, list[dict]]:
    """Per group, the `n` rows of lowest `rank(key(row))`, in that order; a None group is skipped."""
    heaps: dict[str, list] = {}
    for seen, row in enumerate(rows):
        name = group(row)
        if name is None:
            continue
        # A max-heap of the n lowest ranks; `seen` breaks ties before rows are compared.
        item = (-rank(key(row)), key(row), -seen, row)
        heap = heaps.setdefault(name, [])
        if len(heap) < n:
            heapq.heappush(heap, item)
        elif item[:3] > heap[0][:3]:
            heapq.heapreplace(heap, item)
    return {name: [item[-1] for item in sorted(heap, key=lambda i: (-i[0], i[1], -i[2]))]
            for name, heap in sorted(heaps.items())}


def table_parts(directory: str, name: str, columns: Sequence[str]) -> Iterator[pa.Table]:
    """The parts of one table of a run; nothing for a table the run did not write."""
    path = posixpath.join(directory, name)
    if not storage.has_files(path):
        return iter(())
    return tables.iter_parts(path, list(columns), present_only=True)


def clip(text: Optional[str]) -> str:
    text = text or ''
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + '…'


def rejected_examples(directory: str, n: int = 3) -> dict[str, list[dict]]:
    """Per rejection reason, n rejected records (source, doc_id, detail)."""
    rows = rows_of(table_parts(directory, tables.REJECTED_DIR, ['source', 'doc_id', 'reason', 'detail']))
    return sample_by(rows, lambda r: r['reason'], lambda r: r['source'], n)


def dropped_samples(directory: str, n: int = 5) -> dict[str, list[dict]]:
    """Per drop reason, n dropped chunks (chunk_id, doc_id, text, duplicate_of, score)."""
    columns = ['chunk_id', 'doc_id', 'text', 'reason', 'duplicate_of', 'score']
    rows = ({**r, 'text': clip(r['text'])} for r in rows_of(table_parts(directory, tables.DROPPED_DIR, columns)))
    return sample_by(rows, lambda r: r['reason'], lambda r: r['chunk_id'], n)


def delta_samples(directory: str, n: int = 5) -> list[dict]:
    """n delta chunks (chunk_id, doc_id, text, delta_of)."""
    columns = ['chunk_id', 'doc_id', 'text', 'kind', 'delta_of']
    rows = ({**r, 'text': clip(r['text'])} for r in rows_of(table_parts(directory, tables.CHUNKS_DIR, columns))
            if r.get('kind') == 'delta')
    return sample_by(rows, lambda r: 'delta', lambda r: r['chunk_id'], n).get('delta', [])


def texts_of(directory: str, chunk_ids: Iterable[str]) -> dict[str, str]:
    """The texts of a few chunks, kept (chunks/) or dropped later in the cascade (dropped/)."""
    wanted = set(chunk_ids)
    found: dict[str, str] = {}
    for name in (tables.CHUNKS_DIR, tables.DROPPED_DIR):
        if len(found) == len(wanted):
            break
        for part in table_parts(directory, name, ['chunk_id', 'text']):
            for chunk_id, text in zip(part.column('chunk_id').to_pylist(), part.column('text').to_pylist()):
                if chunk_id in wanted and chunk_id not in found:
                    found[chunk_id] = clip(text)
    return found


def run_samples(directory: str, per_group: int = 5) -> dict:
    """Everything the report shows of a run's rows: rejected, dropped and delta samples with their keepers."""
    dropped = dropped_samples(directory, per_group)
    deltas = delta_samples(directory, per_group)
    keepers = {r['duplicate_of'] for rows in dropped.values() for r in rows if r['duplicate_of']}
    keepers |= {r['delta_of'] for r in deltas if r['delta_of']}
    return {'rejected': rejected_examples(directory, 3), 'dropped': dropped, 'deltas': deltas,
            'keepers': texts_of(directory, keepers)}
