"""Covered: within each document, drop the chunks whose text the other kept chunks' spans already hold.

An overlapping chunker (400/200) repeats every character in two chunks by
design. Chunks carry exact offsets into their document, so whether a
chunk's text is already held by the chunks kept is arithmetic on spans, not
a similarity guess. Holds the cover (`minimum_cover`), the per-document
decision (`covered`) and the filter's registry entry.
"""

from __future__ import annotations

import bisect
import collections
import re
from typing import Mapping, Optional, Sequence

import numpy as np

from transforms.dedup.keep import keep_order_key, kept_and_dropped
from transforms.dedup.registry import GROUPED, FilterDef
from transforms.features.embedding import unit_rows
from transforms.types import Chunk, Dropped

# Drop reasons: the dropped chunk lies inside its keeper's span (retrieving
# the keeper returns all of it), or its text is spread over its keeper and
# the next kept chunk(s), the keeper holding the most of it.
COVERED_WHOLE = 'covered_whole'
COVERED_SPLIT = 'covered_split'
REASONS = (COVERED_WHOLE, COVERED_SPLIT)

_CONTENT = re.compile(r'\S')


def _first_content(chunk: Chunk, at: int) -> Optional[int]:
    """The document offset of the chunk's first non-whitespace character at or after `at`, or None."""
    m = _CONTENT.search(chunk.text, max(0, at - chunk.char_start))
    return None if m is None else chunk.char_start + m.start()


def minimum_cover(chunks: Sequence[Chunk]) -> list[int]:
    """A minimum set of one document's chunks covering every character that any of them covers.

    Whitespace does not need covering: chunkers strip it from chunk ends, so
    two windows that meet at a space never hold that space, and requiring it
    would keep every middle window of a 400/200 chunker. Every other
    character of every chunk lies in a chosen chunk.

    The classic greedy cover of points by intervals, which is optimal: take
    the first character not yet covered and, of the chunks starting at or
    before it, the one reaching furthest right. Ties (the same end) go to
    the earliest start, which contains the others, then to the keep rule
    (`keep_order_key`). O(n log n) for the sort, then one pass that reads
    only the whitespace where a chosen chunk ends; the chosen chunks' starts
    and ends both increase strictly.

    Args:
      chunks: Chunks of one document (`char_start`, `char_end`, `text`), any order.

    Returns:
      Positions into `chunks` of the chosen ones, in document order.
    """
    order = sorted(range(len(chunks)), key=lambda i: (
        chunks[i].char_start, -chunks[i].char_end, keep_order_key(chunks[i])))
    chosen: list[int] = []
    at = 0  # every character before `at` that needs covering is covered
    best: Optional[int] = None  # of the chunks starting at or before `at`, the one reaching furthest
    scanned = 0

    def take_in(upto: int) -> None:
        nonlocal best, scanned
        while scanned < len(order) and chunks[order[scanned]].char_start <= upto:
            i = order[scanned]
            # Strictly further only: of equal ends the earlier in `order` stays.
            if best is None or chunks[i].char_end > chunks[best].char_end:
                best = i
            scanned += 1

    while True:
        take_in(at)
        if best is not None and chunks[best].char_end > at:
            point = _first_content(chunks[best], at)
            if point is None:  # only whitespace is left of it
                at = chunks[best].char_end
                continue
        elif scanned < len(order):
            at = chunks[order[scanned]].char_start  # no chunk holds the text in between
            continue
        else:
            return sorted(chosen, key=lambda i: chunks[i].char_start)
        take_in(point)
        chosen.append(best)
        at = chunks[best].char_end


def covered(chunks: Sequence[Chunk]) -> tuple[list[Chunk], list[Dropped]]:
    """Keeps a minimum cover of one document's chunks (`minimum_cover`) and drops the rest.

    Each dropped chunk names as `duplicate_of` the kept chunk whose span
    holds most of its characters (ties: the earlier one), with that share as
    its score: `covered_whole` (score 1.0) when the keeper's span contains
    it, `covered_split` when the rest of it is in its other kept neighbour(s).
    Every non-whitespace character of a dropped chunk is in a kept chunk of
    the same document, so no sentence of it is lost, though one it held
    whole may now be split across two kept chunks. A chunk that shares no
    character with a kept one (only possible for an all-whitespace chunk,
    which no chunker cuts) is kept: nothing would represent it.

    Args:
      chunks: The chunks of one document.

    Returns:
      `(kept, dropped)`, both in input order.

    Raises:
      ValueError: If the chunks span several documents.
    """
    doc_ids = sorted({c.doc_id for c in chunks})
    if len(doc_ids) > 1:
        raise ValueError(f'covered takes one document, got {doc_ids[:5]}')
    chosen = minimum_cover(chunks)
    # The chosen chunks' ends increase with their starts, so the kept chunks
    # overlapping a span are a run found by bisection.
    ends = [chunks[i].char_end for i in chosen]
    keep = set(chosen)
    dropped = {}
    for i, chunk in enumerate(chunks):
        if i in keep:
            continue
        holder, most = None, 0
        for k in range(bisect.bisect_right(ends, chunk.char_start), len(chosen)):
            j = chosen[k]
            if chunks[j].char_start >= chunk.char_end:
                break
            overlap = min(chunk.char_end, chunks[j].char_end) - max(chunk.char_start, chunks[j].char_start)
            if overlap > most:
                holder, most = j, overlap
        if holder is None:
            continue
        length = chunk.char_end - chunk.char_start
        reason = COVERED_WHOLE if most == length else COVERED_SPLIT
        dropped[i] = Dropped(chunk, reason, chunks[holder].chunk_id, most / length)
    return kept_and_dropped(chunks, dropped)


def pooled_vectors(vectors: np.ndarray, held: Mapping[int, Sequence[int]]) -> np.ndarray:
    """The vectors with each keeper's row the unit mean of its own and those of the covered chunks it holds.

    A kept chunk longer than the model's input is embedded from its start
    only, so the covered chunk that began inside it was the one vector of
    its tail; pooling puts that vector into the keeper's, adding no row.

    Args:
      vectors: `(n, dim)` unit rows, one per chunk.
      held: `{keeper row: rows of the covered chunks it holds}`.

    Returns:
      A new `(n, dim)` float32 array.
    """
    out = np.array(vectors, dtype=np.float32)
    for keeper, rows in held.items():
        out[keeper] = unit_rows(vectors[[keeper, *rows]].mean(axis=0, keepdims=True))[0]
    return out


def doc_id_of(chunk) -> str:
    """The group key: the chunk's document."""
    return chunk.doc_id


def decide(chunks, threshold, config):
    by_doc = collections.defaultdict(list)
    for chunk in chunks:
        by_doc[chunk.doc_id].append(chunk)
    kept, dropped = [], []
    for doc_id in sorted(by_doc):
        doc_kept, doc_dropped = covered(by_doc[doc_id])
        kept.extend(doc_kept)
        dropped.extend(doc_dropped)
    return sorted(kept, key=Chunk.sort_key), sorted(dropped, key=lambda d: d.chunk.sort_key())


FILTER = FilterDef(
    name='covered', label='Covered', position=10,
    removes='within each document: every chunk whose characters the other kept chunks\' spans '
            'already hold (whitespace aside): a minimum cover of the document\'s chunks is kept '
            '(greedy by offsets, exact); `duplicate_of` is the kept chunk holding most of it '
            '(`covered_whole`: all of it; `covered_split`: the rest in its other kept neighbour)',
    default=None, needs=frozenset(), strategy=GROUPED, decide=decide, group_key=doc_id_of,
    span_reasons=frozenset(REASONS))
