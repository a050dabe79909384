"""Similarity: cosine to an already kept chunk, greedy in keep order (the study's `Similarity`).

Holds the family's in-memory decision (`similar_pairs`, `drop_similar`) and
its shared definition (`similarity_filter`), used by `similarity_topics`,
`similarity_ner` and `similarity_topics_ner`, which add a condition checked
on each verified edge; the build's Beam stage is `similarity.stage.DropSimilarPairs`.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from transforms.dedup.keep import SIM_EPS, keep_order, kept_and_dropped, require_field
from transforms.dedup.registry import PAIRS, FilterDef
from transforms.features.embedding import unit_rows
from transforms.features.entities import entity_names
from transforms.types import Chunk, Dropped
from transforms.validate import check_threshold

# FAISS only proposes candidates (in float32); every pair is then re-scored in
# float64, so its margin only has to exceed float32 error.
_FAISS_MARGIN = 1e-3
_FAISS_QUERY_BLOCK = 1024


def similar_pairs(embeddings: np.ndarray, threshold: float) -> list[list[tuple[int, float]]]:
    """Finds, for each row, the other rows with cosine at least `threshold`.

    FAISS `IndexFlatIP.range_search` over the unit rows proposes candidates
    (exact search, in blocks of queries to bound memory); each candidate is
    re-scored in float64 so the decision does not depend on BLAS blocking.

    Args:
      embeddings: `(n, dim)` vectors (normalized here).
      threshold: Cosine threshold.

    Returns:
      Per row, `(other_row, cosine)` pairs sorted by row.
    """
    import faiss

    x64 = unit_rows(embeddings)
    n = x64.shape[0]
    out: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    if n < 2:
        return out
    x32 = np.ascontiguousarray(x64, dtype=np.float32)
    index = faiss.IndexFlatIP(x32.shape[1])
    index.add(x32)
    for start in range(0, n, _FAISS_QUERY_BLOCK):
        block = x32[start : start + _FAISS_QUERY_BLOCK]
        lims, _, ids = index.range_search(block, float(threshold) - _FAISS_MARGIN)
        for q in range(block.shape[0]):
            i = start + q
            others = np.sort(ids[lims[q] : lims[q + 1]])
            others = others[others != i]
            if others.size:
                sims = x64[others] @ x64[i]
                out[i] = [
                    (int(j), float(s))
                    for j, s in zip(others, sims)
                    if s >= threshold - SIM_EPS
                ]
    return out


def drop_similar(
    chunks: Sequence[Chunk],
    threshold: float = 0.8,
    require_same_topic: bool = False,
    require_shared_entity: bool = False,
) -> tuple[list[Chunk], list[Dropped]]:
    """Similarity [+ Topics] [+ NER]: drops chunks semantically close to a kept one.

    Chunks are visited in `keep_order_key` order and a chunk is dropped when
    it is redundant with a chunk already *kept* (greedy). Redundant means
    cosine >= `threshold`, and, if required, the same `topic` and at least
    one shared entity name (`entity_names`). Greedy against kept chunks, not
    connected components, so a chain a~b~c with a, c dissimilar keeps a and
    c: nothing is removed unless something close to it stays in the index.
    A chunk without entities is never dropped under `require_shared_entity`.

    Args:
      chunks: Chunks with `embedding` set (and `topic` / `entities` when
        required).
      threshold: Cosine threshold in (0, 1].
      require_same_topic: Only compare chunks of the same topic.
      require_shared_entity: Only compare chunks sharing an entity name.

    Returns:
      `(kept, dropped)`; reason `similarity`, `similarity_topics`,
      `similarity_ner` or `similarity_topics_ner`; duplicate_of is the most
      similar qualifying kept chunk, score its cosine.

    Raises:
      ValueError: If the threshold is out of range or a required feature is
        missing.
    """
    check_threshold('similarity threshold', threshold)
    reason = 'similarity' + ('_topics' if require_same_topic else '') + (
        '_ner' if require_shared_entity else ''
    )
    if not chunks:
        return [], []
    require_field(chunks, 'embedding')
    if require_same_topic:
        require_field(chunks, 'topic')
    if require_shared_entity:
        require_field(chunks, 'entities')
    names = [entity_names(c.entities) for c in chunks] if require_shared_entity else None
    neighbours = similar_pairs(np.stack([c.embedding for c in chunks]), threshold)
    order = keep_order(chunks)
    kept = [False] * len(chunks)
    rank = {i: r for r, i in enumerate(order)}
    dropped = {}
    for i in order:
        best = None
        for j, sim in neighbours[i]:
            if not kept[j]:
                continue
            if require_same_topic and chunks[j].topic != chunks[i].topic:
                continue
            if require_shared_entity and not names[i] & names[j]:
                continue
            if best is None or (sim, -rank[j]) > (best[1], -rank[best[0]]):
                best = (j, sim)
        if best is None:
            kept[i] = True
        else:
            dropped[i] = Dropped(chunks[i], reason, chunks[best[0]].chunk_id, best[1])
    return kept_and_dropped(chunks, dropped)


def decide(chunks, threshold, config, same_topic=False, shared_entity=False):
    return drop_similar(chunks, threshold, require_same_topic=same_topic, require_shared_entity=shared_entity)


def similarity_filter(name: str, label: str, position: int, removes: str,
                      same_topic: bool, shared_entity: bool) -> FilterDef:
    """A member of the similarity family: the same decision and Beam stage, with its conditions."""
    needs = (frozenset({'embedding'}) | frozenset({'topics'} if same_topic else set())
             | frozenset({'entities'} if shared_entity else set()))
    return FilterDef(
        name=name, label=label, position=position, removes=removes, default=0.8, needs=needs,
        strategy=PAIRS, options={'same_topic': same_topic, 'shared_entity': shared_entity},
        near_copy_reasons=frozenset({name}), semantic=True,
        decide=functools.partial(decide, same_topic=same_topic, shared_entity=shared_entity))


FILTERS = (
    similarity_filter(
        'similarity', 'Similarity', 3,
        'cosine ≥ τ to an already kept chunk, greedy in keep order (build: candidates within the 3 nearest '
        'of n/500 seeded KMeans clusters, verified by exact cosine; evaluation: FAISS range search)',
        same_topic=False, shared_entity=False),
    similarity_filter(
        'similarity_topics', 'Similarity + Topics', 4, '... and the same KMeans topic',
        same_topic=True, shared_entity=False),
    similarity_filter(
        'similarity_ner', 'Similarity + NER', 5, '... and at least one shared entity',
        same_topic=False, shared_entity=True),
    similarity_filter(
        'similarity_topics_ner', 'Similarity + Topics + NER', 6, '... and both',
        same_topic=True, shared_entity=True),
)
