"""Query-time metadata filters: which chunks a `where` admits, applied inside the search.

`where` maps metadata keys to allowed values: AND across keys, OR within a
key (`{'release': ['3.11', '3.12'], 'tenant': 'a'}`; on the command line
`--where release=3.11 --where release=3.12 --where tenant=a`). A chunk is
admitted when its own document or any document it represents (the chunks
dropped as its duplicates, `transforms.lineage`) has matching metadata, so
a question restricted to release 3.12 still finds a paragraph whose kept
copy came from the 3.11 document.

Values are compared as text: a string as itself, anything else as its JSON
(`3.12` matches the string "3.12" and the number 3.12, `true` matches
true, `null` matches null). A list value matches when one of its elements
does. A document without the key never matches it.

The admitted rows are an allow-list applied inside the search: a FAISS
`IDSelectorBatch` for the dense part and the same mask on the BM25 scores,
so a rare value still gets k results when k chunks have it (no
over-fetching and post-filtering).
"""

from __future__ import annotations

import collections
import json
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from transforms.output import tables

Where = Mapping[str, Any]


def value_text(value) -> str:
    """A metadata or filter value as the text filters compare (see module docstring)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def parse_where(items: Optional[Sequence[str]]) -> dict[str, list[str]]:
    """Parses repeated `key=value` flags into `{key: [values]}` (same key twice = OR).

    Raises:
      ValueError: For an item without `=` or with an empty key.
    """
    out: dict[str, list[str]] = {}
    for item in items or ():
        key, sep, value = item.partition('=')
        if not sep or not key.strip():
            raise ValueError(f'--where takes key=value, got {item!r}')
        out.setdefault(key.strip(), []).append(value)
    return out


def normalize_where(where: Optional[Where]) -> dict[str, frozenset[str]]:
    """`{key: value or list of values}` -> `{key: frozenset of value texts}`.

    Raises:
      ValueError: For a `where` that is not a mapping, an empty key or a key with no values.
    """
    if where is not None and not isinstance(where, Mapping):
        shown = repr(where) if len(repr(where)) <= 60 else repr(where)[:57] + '...'
        raise ValueError(f'where must be a mapping {{key: value or [values]}} (e.g. {{"tenant": "a"}}), '
                         f'got {type(where).__name__} {shown}')
    out = {}
    for key, values in (where or {}).items():
        if not isinstance(key, str) or not key:
            raise ValueError(f'where keys must be non-empty strings, got {key!r}')
        if not isinstance(values, (list, tuple, set, frozenset)):
            values = [values]
        if not values:
            raise ValueError(f'where[{key!r}] lists no values')
        out[key] = frozenset(value_text(v) for v in values)
    return out


def metadata_values(metadata: Optional[str]) -> dict[str, set[str]]:
    """The value texts of each top-level key of a metadata JSON object (list elements each)."""
    if not metadata:
        return {}
    try:
        values = json.loads(metadata)
    except ValueError:
        return {}
    if not isinstance(values, dict):
        return {}
    out = {}
    for key, value in values.items():
        items = value if isinstance(value, list) else [value]
        out[key] = {value_text(v) for v in items}
    return out


class MetadataFilter:
    """The rows of an index that a `where` admits, and which document admitted each.

    Holds an inverted index `(key, value text) -> documents` and, per
    document, the rows it admits (the chunks of that document and the chunks
    representing one of its chunks). A query costs the postings it reads.

    Args:
      doc_ids: The document of each row.
      represents: Per row, the `(chunk_id, doc_id)` pairs it represents.
      metadata: Metadata JSON per document id (None or absent: no metadata).
    """

    def __init__(
        self,
        doc_ids: Sequence[str],
        represents: Sequence[Sequence[tuple[str, str]]],
        metadata: Mapping[str, Optional[str]],
    ):
        self.n_rows = len(doc_ids)
        # Per document, the rows it admits, own rows first (so "matched_by" lists the own document first).
        self._rows: dict[str, list[int]] = collections.defaultdict(list)
        for row, doc_id in enumerate(doc_ids):
            self._rows[doc_id].append(row)
        for row, pairs in enumerate(represents):
            for doc_id in sorted({d for _, d in pairs or ()}):
                if doc_id != doc_ids[row]:
                    self._rows[doc_id].append(row)
        self._own = list(doc_ids)
        self._postings: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
        for doc_id in self._rows:
            for key, texts in metadata_values(metadata.get(doc_id)).items():
                for text in texts:
                    self._postings[(key, text)].add(doc_id)

    def documents(self, where: Where) -> set[str]:
        """The documents whose metadata matches `where`."""
        selected: Optional[set[str]] = None
        for key, texts in normalize_where(where).items():
            docs = set().union(*(self._postings.get((key, t), set()) for t in texts))
            selected = docs if selected is None else selected & docs
            if not selected:
                return set()
        return selected if selected is not None else set(self._rows)

    def matches(self, where: Where) -> dict[int, list[str]]:
        """Admitted row -> the matching documents that admit it (own document first, then sorted)."""
        out: dict[int, list[str]] = collections.defaultdict(list)
        for doc_id in sorted(self.documents(where)):
            for row in self._rows.get(doc_id, ()):
                out[row].append(doc_id)
        for row, docs in out.items():
            own = self._own[row]
            if own in docs and docs[0] != own:
                docs.remove(own)
                docs.insert(0, own)
        return dict(out)

    def mask(self, rows: Mapping[int, Any]) -> np.ndarray:
        """A boolean row mask of the admitted rows."""
        mask = np.zeros(self.n_rows, bool)
        mask[list(rows)] = True
        return mask


def load_metadata_filter(index_dir: str, chunk_ids: Sequence[str]) -> MetadataFilter:
    """Builds the filter of a built index, rows in the order of `chunk_ids`.

    Reads chunks/ (doc_id, represents, own metadata) and documents/ (the
    metadata of represented documents), the columns an older build has;
    rows are aligned by chunk_id.

    Raises:
      ValueError: If chunks/ lacks a chunk of `chunk_ids`.
    """
    table = tables.read_table(os.path.join(index_dir, tables.CHUNKS_DIR),
                              ('chunk_id', 'doc_id', 'metadata', 'represents'), present_only=True)
    names = table.column_names
    ids = table.column('chunk_id').to_pylist()
    doc_ids = table.column('doc_id').to_pylist()
    own_meta = table.column('metadata').to_pylist()
    reps = table.column('represents').to_pylist() if 'represents' in names else [None] * len(ids)
    row_of = {c: i for i, c in enumerate(ids)}
    missing = [c for c in chunk_ids if c not in row_of]
    if missing:
        raise ValueError(f'chunks/ of {index_dir!r} lacks chunks {missing[:5]}')
    metadata: dict[str, Optional[str]] = {}
    documents = os.path.join(index_dir, tables.DOCUMENTS_DIR)
    if os.path.isdir(documents):
        docs = tables.read_table(documents, ('doc_id', 'metadata'), present_only=True)
        if 'metadata' in docs.column_names:
            metadata.update(zip(docs.column('doc_id').to_pylist(), docs.column('metadata').to_pylist()))
    metadata.update(zip(doc_ids, own_meta))
    rows = [row_of[c] for c in chunk_ids]
    return MetadataFilter(
        [doc_ids[r] for r in rows],
        [[(p['chunk_id'], p['doc_id']) for p in reps[r] or ()] for r in rows],
        metadata,
    )


def _search_parameters(index, selector):
    import faiss

    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        return faiss.SearchParametersIVF(sel=selector, nprobe=ivf.nprobe)
    if isinstance(index, faiss.IndexHNSW):
        return faiss.SearchParametersHNSW(sel=selector, efSearch=index.hnsw.efSearch)
    if isinstance(index, faiss.IndexPQ):
        return faiss.SearchParametersPQ(sel=selector)
    return faiss.SearchParameters(sel=selector)


def dense_search(index, embeddings: np.ndarray, query: np.ndarray, n: int,
                 allowed: Optional[np.ndarray] = None) -> list[int]:
    """The dense top-n rows for a query, only among `allowed` rows when given.

    The allow-list is a FAISS `IDSelectorBatch` inside the search, for every
    index type (flat, IVF, HNSW, PQ, SQ). An approximate index can return
    fewer than `min(n, len(allowed))` admitted rows (IVF lists not probed,
    an HNSW graph cut by a selective filter); then the admitted rows are
    scored exactly from `embeddings`, so a rare value still gets its rows.

    Args:
      index: The FAISS index, position i = row i.
      embeddings: Normalized row embeddings (for the exact fallback).
      query: The normalized query vector.
      n: How many rows at most.
      allowed: Sorted admitted rows, or None for all.

    Returns:
      Rows, best first.
    """
    import faiss

    q = np.ascontiguousarray(query[None, :], dtype=np.float32)
    if allowed is None:
        _, found = index.search(q, min(n, index.ntotal))
        return [int(r) for r in found[0] if r >= 0]
    want = min(n, len(allowed))
    if want == 0:
        return []
    selector = faiss.IDSelectorBatch(np.asarray(allowed, dtype=np.int64))
    try:
        _, found = index.search(q, want, params=_search_parameters(index, selector))
        rows = [int(r) for r in found[0] if r >= 0]
    except RuntimeError:  # an index type without selector support
        rows = []
    if len(rows) >= want:
        return rows
    scores = embeddings[allowed] @ np.asarray(query, np.float32)
    order = np.lexsort((allowed, -scores))[:want]
    return [int(allowed[i]) for i in order]
