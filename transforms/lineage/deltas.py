"""Delta chunks: the sentences a dropped duplicate has that the kept chunk representing it lacks.

A chunk dropped as a copy or a lexical near-copy (`exact`, `minhash`,
`intra_doc_near`; `similarity*` only with `FilterConfig.semantic_deltas`)
usually differs from the chunk kept for it by a few sentences: a version
number changed, a bullet added. Those sentences are what a user of the newer
document asks about, so each run of adjacent novel sentences becomes a delta
chunk: a span of the dropped chunk's own document (`doc[char_start:char_end]
== text`), embedded and searchable, `kind = 'delta'`, chunk_id
`{dropped chunk_id}~delta{k}`, `delta_of` = the kept chunk.

The comparison is with the kept chunk that represents the dropped one (the
end of its `duplicate_of` chain, `lineage.represents`), not with the chunk it
was dropped for: that one may be dropped later in the cascade, and a
sentence only a dropped chunk holds is not in the index. For the same reason
exact copies are compared too: 3.13's copy of a 3.12 chunk that was dropped
as a near-copy of 3.11's carries 3.12's news; its delta equals 3.12's, is
merged into it and lists it (`merge_equal_deltas`), so a query restricted to
3.13 finds it.

Sentences are a reader's (`lineage.sentences`: wrapped lines joined, list
items, headings, table rows and code lines apart), and a sentence is news
unless the kept chunk covers it (`sentences.is_covered`: 80% of its word
4-grams and every token with a digit in one kept sentence). A delta is made
of whole sentences and reads on its own:
- a run of fewer than `MIN_DELTA_WORDS` tokens (a heading "3.13.1", a bullet
  "- Python 3.13") takes in the sentence after it (before it at the chunk's
  end), so the changed words come with what they are about;
- a run at the chunk's edge whose sentence the chunker cut (a long wrapped
  paragraph split at a line) is extended to that sentence's start or end in
  the document, by at most `MAX_WIDEN_CHARS`, so "Unicode 15.1.0 can be
  found at ..." keeps its subject.
Deltas against one kept chunk with the same normalized text are merged.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.chunking.chunkers import token_offsets
from transforms.features.embedding import EmbeddingConfig, SharedModel, embed_texts
from transforms.lineage.sentences import DocumentSentences, KeptText, Span, is_covered, sentence_spans, tokens
from transforms.text import content_hash
from transforms.types import DELTA, Chunk, Dropped

MIN_DELTA_WORDS = 3
# A sentence longer than this on the other side of a chunk edge is cut at a space (~100 tokens).
MAX_WIDEN_CHARS = 400
DELTA_SEPARATOR = '~delta'

COUNTER_NAMESPACE = 'deltas'
COUNTER_SOURCES = 'near_duplicates'
COUNTER_DELTAS = 'deltas'
COUNTER_EMBEDDED = 'embedded'
COUNTER_MERGED = 'merged'

_SPACE = re.compile(r'\s+')


@dataclasses.dataclass(frozen=True)
class Duplicate:
    """A dropped chunk with a keeper, ready to be compared with the kept chunk that represents it.

    Attributes:
      dropped: The dropped row; its chunk carries text, offsets and metadata, no features.
      keeper: chunk_id of the kept chunk that represents it.
      before: The document's text from the start of the chunk's first
        sentence to the chunk's start: '' when the chunk starts a sentence.
      after: The document's text from the chunk's end to the end of its
        last sentence: '' when the chunk ends one.
      sentences: The chunk's sentences as offsets into its text, from its
        document's (`DocumentSentences.clip`); None: those of the text alone.
    """

    dropped: Dropped
    keeper: str
    before: str = ''
    after: str = ''
    sentences: Optional[tuple[Span, ...]] = None

    def sentence_spans(self) -> Sequence[Span]:
        """The chunk's sentences, as offsets into its text."""
        text = self.dropped.chunk.text
        return sentence_spans(text) if self.sentences is None else self.sentences


def sentence_context(document: DocumentSentences, start: int, end: int) -> tuple[str, str]:
    """`(before, after)` for a chunk `[start, end)` of a document: the parts of the sentences it cuts.

    Returns:
      The text of the sentence holding `start` before it, and of the one
      holding `end` after it, each at most MAX_WIDEN_CHARS and cut at a
      space beyond that.
    """
    text = document.text
    before = after = ''
    first, last = document.around(start), document.around(end)
    if first:
        begin = first[0]
        if start - begin > MAX_WIDEN_CHARS:
            space = _SPACE.search(text, start - MAX_WIDEN_CHARS, start)
            begin = space.end() if space else start
        before = text[begin:start]
    if last:
        stop = last[1]
        if stop - end > MAX_WIDEN_CHARS:
            space = max(text.rfind(c, end, end + MAX_WIDEN_CHARS) for c in ' \t\n')
            stop = space if space > end else end
        after = text[end:stop].rstrip()
    return before, after


def novel_runs(sentences: Sequence[Sequence[str]], kept: KeptText) -> list[tuple[int, int]]:
    """`[i, j)` ranges of adjacent sentences the kept ones do not cover, widened to MIN_DELTA_WORDS tokens.

    Args:
      sentences: Tokens of each sentence of the dropped chunk, in order.
      kept: The sentences of the kept chunk.

    Returns:
      Disjoint, non-adjacent ranges in order; a short run takes in the
      sentences after it (before it at the end) until it has
      MIN_DELTA_WORDS tokens or the chunk has no more.
    """
    runs: list[list[int]] = []
    for i, sentence in enumerate(sentences):
        if is_covered(sentence, kept):
            continue
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    out: list[list[int]] = []
    for i, j in runs:
        while sum(len(s) for s in sentences[i:j]) < MIN_DELTA_WORDS and (j < len(sentences) or i > 0):
            if j < len(sentences):
                j += 1
            else:
                i -= 1
        if out and i <= out[-1][1]:
            out[-1][1] = max(out[-1][1], j)
        else:
            out.append([i, j])
    return [(i, j) for i, j in out]


def novel_spans(text: str, kept: KeptText, spans: Optional[Sequence[Span]] = None) -> list[Span]:
    """`(start, end)` offsets into `text` of its delta runs (`novel_runs`), first sentence to last.

    Args:
      text: The dropped chunk's text.
      kept: The sentences of the kept chunk.
      spans: The text's sentences; by default those of the text alone.
    """
    spans = sentence_spans(text) if spans is None else spans
    runs = novel_runs([tokens(text[s:e]) for s, e in spans], kept)
    return [(spans[i][0], spans[j - 1][1]) for i, j in runs]


def delta_chunks(duplicate: Duplicate, kept: KeptText) -> list[Chunk]:
    """The delta chunks of a duplicate, against the sentences of the kept chunk representing it.

    Args:
      duplicate: The dropped chunk, with the document text around its edges.
      kept: The sentences of the kept chunk (`sentences.KeptText`).

    Returns:
      Chunks `{chunk_id}~delta{k}` with the dropped chunk's doc_id,
      chunk_index and metadata, exact offsets into its document,
      `kind='delta'` and `delta_of` = the kept chunk; no embedding and
      n_tokens 0 until `EmbedDeltas`.
    """
    chunk = duplicate.dropped.chunk
    if kept.holds(chunk.content_hash):
        return []
    out = []
    for k, (s, e) in enumerate(novel_spans(chunk.text, kept, duplicate.sentence_spans())):
        before = duplicate.before if s == 0 else ''
        after = duplicate.after if e == len(chunk.text) else ''
        text = before + chunk.text[s:e] + after
        start = chunk.char_start + s - len(before)
        out.append(Chunk(
            chunk_id=f'{chunk.chunk_id}{DELTA_SEPARATOR}{k}',
            doc_id=chunk.doc_id,
            chunk_index=chunk.chunk_index,
            text=text,
            char_start=start,
            char_end=start + len(text),
            n_tokens=0,
            content_hash=content_hash(text),
            metadata=chunk.metadata,
            kind=DELTA,
            delta_of=duplicate.keeper,
        ))
    return out


def merge_equal_deltas(deltas: Iterable[Chunk]) -> list[Chunk]:
    """Keeps one delta per normalized text among the deltas against one kept chunk.

    Two releases that both add the same bullet to the same paragraph give
    the same delta twice; the first by `Chunk.sort_key` is kept and lists the
    others, `(chunk_id, doc_id)`, in `represents`, so a metadata filter on
    their documents still finds it.

    Returns:
      The kept deltas, in `Chunk.sort_key` order.
    """
    by_text: dict[str, list[Chunk]] = {}
    for delta in sorted(deltas, key=Chunk.sort_key):
        by_text.setdefault(delta.content_hash, []).append(delta)
    kept = [
        dataclasses.replace(same[0], represents=tuple(sorted((d.chunk_id, d.doc_id) for d in same[1:])))
        for same in by_text.values()
    ]
    return sorted(kept, key=Chunk.sort_key)


def source_of(delta_id: str) -> str:
    """The chunk_id of the dropped chunk a delta comes from."""
    return delta_id.rsplit(DELTA_SEPARATOR, 1)[0]


# --- Beam ------------------------------------------------------------------------------


class _EmbedDeltasFn(beam.DoFn):
    def __init__(self, model: SharedModel, batch_size: int):
        self._model_handle = model
        self._batch_size = batch_size

    def setup(self):
        self._model = self._model_handle.acquire()
        self._embedded = Metrics.counter(COUNTER_NAMESPACE, COUNTER_EMBEDDED)

    def process(self, batch: list[Chunk]) -> Iterable[Chunk]:
        vectors = embed_texts(self._model, [c.text for c in batch], self._batch_size)
        self._embedded.inc(len(batch))
        for chunk, vector in zip(batch, vectors):
            n_tokens = len(token_offsets(self._model.tokenizer, chunk.text))
            yield dataclasses.replace(chunk, n_tokens=n_tokens, embedding=vector)


class EmbedDeltas(beam.PTransform):
    """PCollection[Chunk] -> the same with `n_tokens` and `embedding` from the embedding model.

    Not `EmbedChunks`, whose counters count the chunks entering the filters.
    """

    def __init__(self, model: SharedModel, config: EmbeddingConfig):
        super().__init__()
        self._model = model
        self._config = config

    def expand(self, chunks):
        return (
            chunks
            | 'BatchDeltas' >> beam.BatchElements(max_batch_size=self._config.batch_size * 4)
            | 'Embed' >> beam.ParDo(_EmbedDeltasFn(self._model, self._config.batch_size))
        )
