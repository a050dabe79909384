"""Each dropped duplicate meets the kept chunk that represents it: its deltas, and the audit of what it loses.

Two keyed joins, nothing gathered:
1. by doc_id (`_ChunksOfDocumentFn`): a document's text, its kept chunks,
   its dropped chunks with a keeper and the kept chunk each one resolves to
   (`ResolveLineage`'s links) -> each kept chunk's `KeptText` (its sentences,
   and whether the chunker cut the first or the last one), and one
   `Duplicate` per dropped chunk, keyed by its kept chunk, with the document
   text around its edges (`deltas.sentence_context`). A group is one
   document and its chunks.
2. by the kept chunk's id (`_CompareWithKeeperFn`): its `KeptText` and its
   duplicates -> their delta chunks (`deltas.delta_chunks`, equal ones
   merged) and one `lossless.Tally`. A group is one kept chunk and what it
   represents.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from transforms.dedup import registry
from transforms.lineage import deltas as deltas_lib
from transforms.lineage import lossless
from transforms.lineage.sentences import DocumentSentences, KeptText
from transforms.types import Chunk, Document, Dropped

TALLIES = 'tallies'
KEPT = 'kept'


def _document_text(document: Document) -> tuple[str, str]:
    return document.doc_id, document.text


def _dropped_by_document(dropped: Dropped) -> tuple[str, Dropped]:
    # Only the text, offsets and metadata are needed: the features would only weigh on the shuffle.
    light = dataclasses.replace(dropped.chunk, embedding=None, minhash=None, entities=None)
    return light.doc_id, dataclasses.replace(dropped, chunk=light)


def _kept_by_document(chunk: Chunk) -> tuple[str, tuple[str, int, int, str]]:
    return chunk.doc_id, (chunk.chunk_id, chunk.char_start, chunk.char_end, chunk.text)


def _keeper_by_document(resolved) -> tuple[str, tuple[str, str]]:
    keeper, link = resolved
    return link.doc_id, (link.chunk_id, keeper)


def _has_keeper(dropped: Dropped) -> bool:
    return dropped.duplicate_of is not None


class _ChunksOfDocumentFn(beam.DoFn):
    """One document and its chunks -> (kept chunk_id, KeptText) (KEPT) and (kept chunk_id, Duplicate) (main)."""

    def __init__(self, sources: frozenset):
        self._sources = sources

    def process(self, element):
        _, grouped = element
        texts = list(grouped['document'])
        document = DocumentSentences(texts[0] if texts else '')
        for chunk_id, start, end, text in grouped['kept']:
            spans, cut_start, cut_end = document.clip(start, end)
            yield pvalue.TaggedOutput(KEPT, (chunk_id, KeptText.of(text, cut_start, cut_end, spans)))
        keepers = dict(grouped['keeper'])
        for dropped in grouped['dropped']:
            keeper = keepers.get(dropped.chunk.chunk_id)
            if keeper is None:  # an orphan: its chain ends at a chunk dropped without a keeper
                continue
            chunk = dropped.chunk
            spans, _, _ = document.clip(chunk.char_start, chunk.char_end)
            before = after = ''
            if dropped.reason in self._sources:
                before, after = deltas_lib.sentence_context(document, chunk.char_start, chunk.char_end)
            yield keeper, deltas_lib.Duplicate(dropped, keeper, before, after, tuple(spans))


class _CompareWithKeeperFn(beam.DoFn):
    """One kept chunk's text and its duplicates -> their deltas (main) and a Tally (TALLIES)."""

    def __init__(self, sources: frozenset):
        self._sources = sources

    def setup(self):
        self._counted_sources = Metrics.counter(deltas_lib.COUNTER_NAMESPACE, deltas_lib.COUNTER_SOURCES)
        self._deltas = Metrics.counter(deltas_lib.COUNTER_NAMESPACE, deltas_lib.COUNTER_DELTAS)
        self._merged = Metrics.counter(deltas_lib.COUNTER_NAMESPACE, deltas_lib.COUNTER_MERGED)
        self._checked = Metrics.counter(lossless.COUNTER_NAMESPACE, lossless.COUNTER_CHECKED)
        self._lost = Metrics.counter(lossless.COUNTER_NAMESPACE, lossless.COUNTER_LOST)

    def process(self, element):
        _, grouped = element
        texts = list(grouped['keeper'])
        # Every link resolves to a kept chunk; were one missing, all its duplicates' sentences count as lost.
        kept = texts[0] if texts else KeptText(())
        found, uncovered = [], []
        chunks = checked = 0
        for duplicate in grouped['duplicate']:
            own = []
            if texts and duplicate.dropped.reason in self._sources:
                own = deltas_lib.delta_chunks(duplicate, kept)
                self._counted_sources.inc()
            found.extend(own)
            n, lost = lossless.uncovered_sentences(duplicate, kept, own)
            chunks, checked = chunks + 1, checked + n
            uncovered.extend(lost)
        if not chunks:
            return
        merged = deltas_lib.merge_equal_deltas(found)
        lost = sorted(lossless.not_in_deltas(uncovered, merged))
        self._deltas.inc(len(merged))
        self._merged.inc(len(found) - len(merged))
        self._checked.inc(checked)
        self._lost.inc(len(lost))
        yield pvalue.TaggedOutput(TALLIES, lossless.Tally(chunks, checked, len(lost), tuple(lost[:lossless.EXAMPLES])))
        yield from merged


class CompareWithKeepers(beam.PTransform):
    """Deltas and the lossless audit of every dropped duplicate.

    Input: a dict with 'documents' (PCollection[Document]), 'kept'
    (PCollection[Chunk]), 'dropped' (PCollection[Dropped]) and 'resolved'
    (PCollection[(kept chunk_id, represents.Link)]: where each dropped
    chunk's chain ends). Output: {'deltas': PCollection[Chunk] of kind delta,
    not embedded, `delta_of` the kept chunk; 'tallies':
    PCollection[lossless.Tally], one per kept chunk with duplicates}.

    Args:
      deltas: Make delta chunks (else only the audit runs, and counts what
        the drops lost).
      semantic: Make them for the similarity* filters' drops too.
    """

    def __init__(self, deltas: bool, semantic: bool = False):
        super().__init__()
        self._sources = registry.delta_reasons(semantic) if deltas else frozenset()

    def expand(self, pcolls):
        by_document = (
            {
                'document': pcolls['documents'] | 'KeyDocumentText' >> beam.Map(_document_text),
                'kept': pcolls['kept'] | 'KeyKeptByDocument' >> beam.Map(_kept_by_document),
                'dropped': pcolls['dropped'] | 'DroppedWithKeeper' >> beam.Filter(_has_keeper)
                | 'KeyDroppedByDocument' >> beam.Map(_dropped_by_document),
                'keeper': pcolls['resolved'] | 'KeyKeeperByDocument' >> beam.Map(_keeper_by_document),
            }
            | 'JoinDocument' >> beam.CoGroupByKey()
            | 'ChunksOfDocument' >> beam.ParDo(_ChunksOfDocumentFn(self._sources)).with_outputs(
                KEPT, main='duplicates')
        )
        outputs = (
            {'keeper': by_document[KEPT], 'duplicate': by_document['duplicates']}
            | 'JoinKeeper' >> beam.CoGroupByKey()
            | 'CompareWithKeeper' >> beam.ParDo(_CompareWithKeeperFn(self._sources)).with_outputs(
                TALLIES, main='deltas')
        )
        return {'deltas': outputs['deltas'], TALLIES: outputs[TALLIES]}
