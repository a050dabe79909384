"""Dedup scope: the metadata values two chunks must share before any filter may compare them.

`--dedup_scope tenant,release` makes every filter treat each distinct
`(tenant, release)` combination as a corpus of its own. The scope key is a
string prepended to every filter's grouping key (content hash, LSH band,
document, global partition), so scoping adds no comparison and no shuffle.

Values are read from the top level of a chunk's metadata (the document's
JSON object). A key the document does not have is its own value: it equals
no present value, JSON `null` included, and equals only other documents
missing that key.
"""

from __future__ import annotations

import json
from typing import Iterable, Optional, Sequence

from transforms.types import Chunk

# The scope key of every chunk when no scope is configured: one partition.
UNSCOPED = ''


def parse_scope(spec: Optional[str]) -> tuple[str, ...]:
    """Parses `--dedup_scope`, e.g. `tenant,release`, into sorted unique keys.

    Raises:
      ValueError: For an empty item in a non-empty list.
    """
    if spec is None or not spec.strip():
        return ()
    keys = [k.strip() for k in spec.split(',')]
    if not all(keys):
        raise ValueError(f'empty metadata key in --dedup_scope {spec!r}')
    return tuple(sorted(set(keys)))


def scope_key(metadata: Optional[str], keys: Sequence[str]) -> str:
    """The scope a document's metadata puts its chunks in.

    Args:
      metadata: The document's metadata as a JSON object string, or None.
      keys: The scope's metadata keys; empty for no scope.

    Returns:
      `UNSCOPED` when `keys` is empty; otherwise canonical JSON of
      `[[key, value], ...]` in key order, where a missing key is written as
      `[key]` (so it differs from `[key, null]`).
    """
    if not keys:
        return UNSCOPED
    values = json.loads(metadata) if metadata else {}
    if not isinstance(values, dict):
        values = {}
    parts = [[k, values[k]] if k in values else [k] for k in keys]
    return json.dumps(parts, sort_keys=True, separators=(',', ':'), ensure_ascii=False)


def chunk_scope(chunk: Chunk, keys: Sequence[str]) -> str:
    """`scope_key` of a chunk's document."""
    return scope_key(chunk.metadata, keys)


def partition(chunks: Iterable[Chunk], keys: Sequence[str]) -> list[list[Chunk]]:
    """Splits chunks by scope, partitions in scope-key order, chunks in input order."""
    groups: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        groups.setdefault(chunk_scope(chunk, keys), []).append(chunk)
    return [groups[k] for k in sorted(groups)]
