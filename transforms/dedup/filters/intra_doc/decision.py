"""Intra-doc: the klarRAG ingestion-phase dedup, within each document.

Holds the chunk salience within a document (`salience`), the per-document
decision (`intra_doc`) and the filter's registry entry.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Sequence

import numpy as np

from transforms.dedup.keep import SIM_EPS, keep_order_key
from transforms.dedup.registry import GROUPED, FilterDef
from transforms.features.embedding import unit_rows
from transforms.types import Chunk, Dropped
from transforms.validate import check_threshold

# A mean embedding shorter than this is float noise (chunks that cancel out).
_SALIENCE_FLAT = 1e-9
_SALIENCE_DECIMALS = 9


def salience(embeddings: np.ndarray) -> np.ndarray:
    """Centrality of each chunk within its document, in [0, 1].

    The cosine of each (unit) embedding to the document's mean embedding,
    clipped to [0, 1]: a chunk about what the document is about scores near
    1.0, one unrelated to the rest near 0 (a chunk pointing away from the
    mean is clipped to 0). A single chunk, or a zero mean, gets 1.0. The
    value is absolute, not scaled within the document, so a document's least
    central chunk is not forced to 0: `intra_doc`'s `min_salience` only drops
    chunks that really are off-topic for their document. Values are rounded
    to 9 decimals, so float error never decides the keep order.

    Args:
      embeddings: `(n, dim)` vectors of one document's chunks.

    Returns:
      `(n,)` float64 salience values.
    """
    x = unit_rows(embeddings) if len(embeddings) else np.zeros((0, 1))
    n = x.shape[0]
    if n == 0:
        return np.zeros(0)
    centroid = x.mean(axis=0)
    norm = np.linalg.norm(centroid)
    if n == 1 or norm <= _SALIENCE_FLAT:
        return np.ones(n)
    # Rounded so chunks equally central up to float error (e.g. the two chunks
    # of any two-chunk document) tie, and `keep_order_key` then picks by position.
    return np.round(np.clip(x @ (centroid / norm), 0.0, 1.0), _SALIENCE_DECIMALS)


def intra_doc(
    chunks: Sequence[Chunk],
    threshold: float = 0.90,
    min_salience: float = 0.05,
    boost: float = 0.15,
    mode: str = 'log',
) -> tuple[list[Chunk], list[Dropped]]:
    """klarRAG ingestion-phase dedup of one document's chunks.

    1. Salience is computed from the embeddings (`salience`: cosine to the
       document's mean embedding, clipped to [0, 1]); chunks below
       `min_salience` are dropped (`intra_doc_low_salience`), i.e. chunks
       nearly orthogonal to the rest of their document.
    2. The rest are visited by salience, highest first, ties in chunk order.
       A chunk whose cosine to an already kept chunk is >= `threshold` is
       dropped in favour of the most similar kept one: with the same
       `content_hash` as an exact duplicate (`intra_doc_exact`, no boost),
       otherwise as a near-duplicate (`intra_doc_near`), which counts as one
       more independent statement of the kept chunk's idea.
    3. Each kept chunk's salience rises by `boost * n` (`mode='linear'`) or
       `boost * log2(1 + n)` (`mode='log'`) for its `n` near-duplicates,
       capped at 1.0. Boosts are applied after all decisions, so they do not
       change the visiting order.

    A chunk without an embedding cannot be compared and is kept unchanged,
    as in the design.

    Args:
      chunks: The chunks of one document, with `embedding` set.
      threshold: Cosine threshold in (0, 1] (design: 0.90).
      min_salience: Salience below which chunks are dropped (design: 0.05).
      boost: Salience added per near-duplicate (design: 0.15).
      mode: `log` (design default, "Logarithmic") or `linear`.

    Returns:
      `(kept, dropped)` in chunk order; kept and dropped chunks carry their
      computed (kept: boosted) salience.

    Raises:
      ValueError: If the chunks span several documents or an argument is out
        of range.
    """
    check_threshold('intra_doc threshold', threshold)
    if not 0.0 <= min_salience <= 1.0:
        raise ValueError(f'intra_doc min_salience must be in [0, 1], got {min_salience}')
    if boost < 0.0:
        raise ValueError(f'intra_doc boost must be >= 0, got {boost}')
    if mode not in ('log', 'linear'):
        raise ValueError(f"intra_doc mode must be 'log' or 'linear', got {mode!r}")
    doc_ids = sorted({c.doc_id for c in chunks})
    if len(doc_ids) > 1:
        raise ValueError(f'intra_doc takes one document, got {doc_ids[:5]}')
    current = list(chunks)
    with_embedding = [i for i, c in enumerate(chunks) if c.embedding is not None]
    if not with_embedding:
        return current, []
    vectors = unit_rows(np.stack([chunks[i].embedding for i in with_embedding]))
    scores = salience(vectors)
    row = {}
    for r, (i, s) in enumerate(zip(with_embedding, scores)):
        current[i] = dataclasses.replace(chunks[i], salience=float(s))
        row[i] = r
    dropped = {}
    candidates = []
    for i in with_embedding:
        if current[i].salience < min_salience:
            dropped[i] = Dropped(current[i], 'intra_doc_low_salience', None, current[i].salience)
        else:
            candidates.append(i)
    selected: list[int] = []
    merged: dict[int, int] = collections.defaultdict(int)
    for i in sorted(candidates, key=lambda i: keep_order_key(current[i])):
        if selected:
            sims = vectors[[row[j] for j in selected]] @ vectors[row[i]]
            best = int(np.argmax(sims))
            if sims[best] >= threshold - SIM_EPS:
                j = selected[best]
                if current[j].content_hash == current[i].content_hash:
                    reason = 'intra_doc_exact'
                else:
                    reason = 'intra_doc_near'
                    merged[j] += 1
                dropped[i] = Dropped(current[i], reason, current[j].chunk_id, float(sims[best]))
                continue
        selected.append(i)
    for j, n in merged.items():
        raised = boost * n if mode == 'linear' else boost * math.log2(1 + n)
        boosted = min(1.0, current[j].salience + raised)
        current[j] = dataclasses.replace(current[j], salience=boosted)
    kept = [c for i, c in enumerate(current) if i not in dropped]
    return kept, [dropped[i] for i in sorted(dropped)]


def doc_id_of(chunk) -> str:
    """The group key: the chunk's document."""
    return chunk.doc_id


def decide(chunks, threshold, config):
    kept, dropped = [], []
    by_doc = collections.defaultdict(list)
    for chunk in chunks:
        by_doc[chunk.doc_id].append(chunk)
    for doc_id in sorted(by_doc):
        doc_kept, doc_dropped = intra_doc(
            by_doc[doc_id], threshold, config.intra_doc_min_salience,
            config.intra_doc_boost, config.intra_doc_boost_mode)
        kept.extend(doc_kept)
        dropped.extend(doc_dropped)
    return sorted(kept, key=Chunk.sort_key), dropped


FILTER = FilterDef(
    name='intra_doc', label='Intra-doc (klarRAG)', position=9,
    removes='within each document: salience < 0.05, or cosine ≥ 0.90 to a more salient kept chunk; '
            'near-duplicates (different hash) raise the kept chunk\'s salience by 0.15·log2(1+n) '
            '(`--intra_doc_boost_mode linear`: 0.15·n), capped at 1.0',
    default=0.90, needs=frozenset({'embedding'}), strategy=GROUPED, decide=decide, group_key=doc_id_of,
    near_copy_reasons=frozenset({'intra_doc_near'}))
