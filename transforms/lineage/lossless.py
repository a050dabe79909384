"""The build's audit: sentences of dropped duplicates that neither a kept chunk nor a delta carries.

Every dropped chunk with a keeper (a duplicate of any filter, whose chain
ends at a kept chunk) is checked sentence by sentence against the kept chunk
that represents it, with the deltas' own rule (`sentences.is_covered`; a
copy of its text is covered whole). A
sentence that it does not cover is carried when it lies inside one of the
chunk's own deltas, or when a delta against the same kept chunk holds a
sentence of the same normalized text (a copy of another release's news);
otherwise it is lost. A drop whose text several kept chunks hold together
(`covered_split`, see `FilterDef.span_reasons`) is checked against every
kept span of its document instead, character by character
(`unheld_sentences`). Sentences without a word token (a fence, a table
rule) are not counted.

With deltas on, every copy or lexical near-copy carries its uncovered
sentences by construction, so `sentences_lost` counts only what the filters
without deltas drop (`similarity*` without `--semantic_deltas`, `ner_*`);
with deltas off it counts what deduplication removed from the index. Drops
without a keeper (`random`, `intra_doc_low_salience`, and the chains that
end at one) remove text on purpose and are not checked.

The check runs where the deltas are made, one kept chunk's group at a time
(`lineage.duplicates`); each group yields a `Tally`, and the tallies are
combined into one small result (sums and the first `EXAMPLES` losses in
document order) that the launcher reads into manifest.json.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import posixpath
from typing import Iterable, Sequence

import apache_beam as beam

from transforms import storage
from transforms.lineage.deltas import Duplicate
from transforms.lineage.sentences import KeptText, is_covered, tokens
from transforms.storage import write_json
from transforms.types import Chunk

EXAMPLES = 5
MAX_EXAMPLE_CHARS = 300
# Written by the pipeline into the run's directory, read into the manifest and deleted by the launcher.
AUDIT_FILE = 'lossless.json'

COUNTER_NAMESPACE = 'lossless'
COUNTER_CHECKED = 'sentences_checked'
COUNTER_LOST = 'sentences_lost'


@dataclasses.dataclass(frozen=True, order=True)
class Loss:
    """A sentence of a dropped chunk that the index does not hold (fields in example order)."""

    doc_id: str
    char_start: int
    chunk_id: str
    keeper: str
    reason: str
    text: str


@dataclasses.dataclass(frozen=True)
class Tally:
    """What the audit counted: dropped chunks, their sentences, the lost ones and the first losses."""

    chunks_checked: int = 0
    sentences_checked: int = 0
    sentences_lost: int = 0
    examples: tuple[Loss, ...] = ()


def uncovered_sentences(
    duplicate: Duplicate, kept: KeptText, own_deltas: Sequence[Chunk]
) -> tuple[int, list[Loss]]:
    """Checks one dropped chunk against the kept chunk representing it and its own deltas.

    Args:
      duplicate: The dropped chunk and the kept chunk representing it.
      kept: The sentences of the kept chunk.
      own_deltas: The deltas made of this chunk (none with deltas off, or
        for a filter without deltas).

    Returns:
      `(sentences checked, the ones neither covered nor inside an own delta)`.
    """
    chunk = duplicate.dropped.chunk
    carried = [(d.char_start, d.char_end) for d in own_deltas]
    copy = kept.holds(chunk.content_hash)
    checked, lost = 0, []
    for s, e in duplicate.sentence_spans():
        words = tokens(chunk.text[s:e])
        if not words:
            continue
        checked += 1
        start, end = chunk.char_start + s, chunk.char_start + e
        if copy or is_covered(words, kept) or any(a <= start and end <= b for a, b in carried):
            continue
        lost.append(Loss(chunk.doc_id, start, chunk.chunk_id, duplicate.keeper, duplicate.dropped.reason,
                         chunk.text[s:e]))
    return checked, lost


def unheld_sentences(
    chunk: Chunk, sentences: Sequence[tuple[int, int]], kept_spans: Sequence[tuple[int, int]], reason: str,
    keeper: str,
) -> tuple[int, list[Loss]]:
    """Checks a dropped chunk against every kept span of its document, character by character.

    For the drops whose text several kept chunks hold together (a
    `covered_split` drop: part in its keeper, the rest in the next kept
    chunk): a sentence is held when each of its non-space characters lies
    inside some kept chunk of the document.

    Args:
      chunk: The dropped chunk.
      sentences: Its sentences, as offsets into its text (`DocumentSentences.clip`).
      kept_spans: `(char_start, char_end)` of the document's kept chunks.
      reason: The drop's reason, and `keeper` its kept chunk, for the examples.

    Returns:
      `(sentences checked, the ones with a character no kept chunk holds)`.
    """
    merged: list[list[int]] = []
    for start, end in sorted(kept_spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = [m[0] for m in merged]

    def gaps(start: int, end: int):
        # The parts of [start, end) outside every kept span: a few per sentence at most.
        i = max(bisect.bisect_right(starts, start) - 1, 0)
        at = start
        while at < end and i < len(merged):
            a, b = merged[i]
            if a > at:
                yield at, min(a, end)
            at, i = max(at, b), i + 1
        if at < end:
            yield at, end

    checked, lost = 0, []
    for s, e in sentences:
        text = chunk.text[s:e]
        if not tokens(text):
            continue
        checked += 1
        base = chunk.char_start
        if any(chunk.text[a - base:b - base].strip() for a, b in gaps(base + s, base + e)):
            lost.append(Loss(chunk.doc_id, chunk.char_start + s, chunk.chunk_id, keeper, reason, text))
    return checked, lost


def not_in_deltas(losses: Iterable[Loss], deltas: Iterable[Chunk]) -> list[Loss]:
    """The losses whose words are in no delta against the same kept chunk, in their order.

    Compared by tokens, not by sentences: a delta's text read alone may be
    cut into sentences otherwise than in its document.
    """
    held = [f' {" ".join(tokens(d.text))} ' for d in deltas]
    return [loss for loss in losses if not any(f' {" ".join(tokens(loss.text))} ' in h for h in held)]


def merge_tallies(tallies: Iterable[Tally]) -> Tally:
    """The sum of the tallies, with the first EXAMPLES losses of all of them (any order in, same out)."""
    chunks = checked = lost = 0
    examples: list[Loss] = []
    for t in tallies:
        chunks += t.chunks_checked
        checked += t.sentences_checked
        lost += t.sentences_lost
        examples = sorted(examples + list(t.examples))[:EXAMPLES]
    return Tally(chunks, checked, lost, tuple(examples))


def report(tally: Tally) -> dict:
    """The manifest's `lossless` section (without the count of drops without a keeper)."""
    return {
        'chunks_checked': tally.chunks_checked,
        'sentences_checked': tally.sentences_checked,
        'sentences_lost': tally.sentences_lost,
        'examples': [
            {'chunk_id': x.chunk_id, 'doc_id': x.doc_id, 'keeper': x.keeper, 'reason': x.reason,
             'text': x.text[:MAX_EXAMPLE_CHARS]}
            for x in tally.examples
        ],
    }


def read_report(directory: str) -> dict:
    """The audit a pipeline wrote into `directory`."""
    return json.loads(storage.read_bytes(posixpath.join(directory, AUDIT_FILE)).decode('utf-8'))


# --- Beam ------------------------------------------------------------------------------


class _MergeTalliesFn(beam.CombineFn):
    """Tallies -> one Tally; stays small whatever the corpus: counts and EXAMPLES losses."""

    def create_accumulator(self):
        return Tally()

    def add_input(self, accumulator, tally):
        return merge_tallies([accumulator, tally])

    def merge_accumulators(self, accumulators):
        return merge_tallies(accumulators)

    def extract_output(self, accumulator):
        return accumulator


def _write_report(tally: Tally, directory: str) -> None:
    write_json(posixpath.join(directory, AUDIT_FILE), report(tally))


class WriteLosslessAudit(beam.PTransform):
    """PCollection[Tally] -> the combined audit, written as `AUDIT_FILE` under `directory`.

    Written even when nothing was dropped (zeros), so the manifest always has it.
    """

    def __init__(self, directory: str):
        super().__init__()
        self._directory = directory

    def expand(self, tallies):
        return (
            tallies
            | 'CombineTallies' >> beam.CombineGlobally(_MergeTalliesFn())
            | 'WriteAudit' >> beam.Map(_write_report, self._directory)
        )
