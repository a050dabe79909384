"""Intra-doc: the klarRAG ingestion-phase dedup, within each document."""

import collections

from transforms import dedup
from transforms.filters import GROUPED, FilterDef
from transforms.types import Chunk


def doc_id_of(chunk) -> str:
    """The group key: the chunk's document."""
    return chunk.doc_id


def decide(chunks, threshold, config):
    kept, dropped = [], []
    by_doc = collections.defaultdict(list)
    for chunk in chunks:
        by_doc[chunk.doc_id].append(chunk)
    for doc_id in sorted(by_doc):
        doc_kept, doc_dropped = dedup.intra_doc(
            by_doc[doc_id], threshold, config.intra_doc_min_salience,
            config.intra_doc_boost, config.intra_doc_boost_mode)
        kept.extend(doc_kept)
        dropped.extend(doc_dropped)
    return sorted(kept, key=Chunk.sort_key), dropped


def transform(index, spec, config):
    # Its own stage: it also warns about (and counts) boosts that lift salience.
    from transforms.filter_chunks import DropIntraDocRedundancy

    return DropIntraDocRedundancy(spec, config, index)


FILTER = FilterDef(
    name='intra_doc', label='Intra-doc (klarRAG)', position=9,
    removes='within each document: salience < 0.05, or cosine ≥ 0.90 to a more salient kept chunk; '
            'near-duplicates (different hash) raise the kept chunk\'s salience by 0.15·log2(1+n) '
            '(`--intra_doc_boost_mode linear`: 0.15·n), capped at 1.0',
    default=0.90, needs=frozenset({'embedding'}), strategy=GROUPED, decide=decide, group_key=doc_id_of,
    beam_transform=transform)
