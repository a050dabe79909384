"""The keep rule and the helpers every filter decision shares."""

from __future__ import annotations

from typing import Sequence

from transforms.types import Chunk, Dropped

# Cosines are computed from float32 vectors, so a vector's cosine with an
# identical copy can come out as 0.99999994; scores this close to the
# threshold count as reaching it.
SIM_EPS = 1e-6


def keep_order_key(chunk: Chunk) -> tuple[float, str, int]:
    """Sort key deciding which chunk of a redundant group is kept: the smallest.

    Highest salience first (None counts as 0), then earliest `(doc_id,
    chunk_index)`. The greedy filters also visit chunks in this order.
    """
    salience = chunk.salience if chunk.salience is not None else 0.0
    return (-salience, chunk.doc_id, chunk.chunk_index)


def kept_and_dropped(
    chunks: Sequence[Chunk], dropped: dict[int, Dropped]
) -> tuple[list[Chunk], list[Dropped]]:
    """A filter's result from its drops by position: `(kept, dropped)`, both in input order."""
    kept = [c for i, c in enumerate(chunks) if i not in dropped]
    return kept, [dropped[i] for i in sorted(dropped)]


def keep_order(chunks: Sequence[Chunk]) -> list[int]:
    """The chunks' positions by `keep_order_key`: the order the greedy filters visit them in."""
    return sorted(range(len(chunks)), key=lambda i: keep_order_key(chunks[i]))


def require_field(chunks: Sequence[Chunk], field: str) -> None:
    """Raises ValueError if a chunk lacks `field` (a feature never computed)."""
    missing = [c.chunk_id for c in chunks if getattr(c, field) is None]
    if missing:
        raise ValueError(f'chunks without {field}: {missing[:5]}')

