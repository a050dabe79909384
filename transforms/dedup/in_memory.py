"""The in-memory dispatch: one filter over a whole corpus held in memory, scope by scope."""

from __future__ import annotations

from typing import Optional, Sequence

from transforms.dedup import scope
from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.types import Chunk, Dropped


def apply_filter(
    chunks: Sequence[Chunk], spec: FilterSpec, config: Optional[FilterConfig] = None
) -> tuple[list[Chunk], list[Dropped]]:
    """Applies one filter to a whole corpus held in memory.

    The one dispatch from filter names to their decisions, through the
    registry (`dedup.registry`, each filter's `decide`): the evaluation
    runs every filter through it. The build distributes the same decisions
    with Beam by each filter's `strategy` (`dedup.stages.filter_transform`).
    With `config.scope`, each scope (`dedup.scope`) is filtered as a
    corpus of its own, so no two chunks of different scopes are compared.

    Args:
      chunks: The corpus's chunks, with the features the filter needs.
      spec: The filter and its threshold.
      config: Seeds and intra_doc settings; defaults for the filters that need none.

    Returns:
      `(kept, dropped)`, kept in canonical `(doc_id, chunk_index)` order.

    Raises:
      ValueError: For an unknown filter name.
    """
    config = config or FilterConfig()
    if config.scope:
        kept, dropped = [], []
        for part in scope.partition(chunks, config.scope):
            part_kept, part_dropped = _apply_unscoped(part, spec, config)
            kept.extend(part_kept)
            dropped.extend(part_dropped)
        return sorted(kept, key=Chunk.sort_key), sorted(dropped, key=lambda d: d.chunk.sort_key())
    return _apply_unscoped(chunks, spec, config)


def _apply_unscoped(
    chunks: Sequence[Chunk], spec: FilterSpec, config: FilterConfig
) -> tuple[list[Chunk], list[Dropped]]:
    from transforms.dedup import registry

    return registry.get(spec.name).decide(sorted(chunks, key=Chunk.sort_key), spec.threshold, config)
