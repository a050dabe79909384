"""Delta chunks: the sentences a near-duplicate has that its keeper lacks stay in the index.

A chunk dropped as a lexical near-duplicate (`minhash`, `intra_doc_near`;
`similarity*` only with `FilterConfig.semantic_deltas`) usually differs from
its keeper by a few sentences: a version number changed, a bullet added. Those
sentences are what a user of the newer document asks about, so each run of
adjacent novel sentences becomes a delta chunk: a span of the dropped chunk's
own document (`doc[char_start:char_end] == text`), embedded and searchable,
`kind = 'delta'`, chunk_id `{dropped chunk_id}~delta{k}`.

Sentences are cut by a regular expression (`sentence_spans`): after `.`, `!`
or `?` (and one closing quote or bracket) followed by whitespace, and at every
line break, so list items and headings are sentences of their own. It is
deterministic, needs no model and runs in linear time; a wrong cut (after
"e.g.") only makes two smaller units, both compared the same way.

A sentence of the dropped chunk is *covered* when one sentence of the keeper
holds at least `COVERAGE` (80%) of its word n-grams (n = 4, or the sentence's
length when shorter) **and** every token of it that contains a digit. The
digit clause is the justified addition to the 80% rule: in a sentence of 23
words or more, changing "Unicode 15.0.0" to "15.1.0" touches at most 4 of its
4-grams, so the n-gram rule alone would call it covered and lose exactly the
news. A delta is kept when it has at least `MIN_DELTA_WORDS` (3) word tokens,
so runs that are only whitespace, punctuation or a stray word are not. Deltas
against one keeper with the same normalized text are merged into one
(`merge_equal_deltas`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.chunking.chunkers import token_offsets
from transforms.dedup import registry
from transforms.features.embedding import EmbeddingConfig, SharedModel, embed_texts
from transforms.text import content_hash, normalize_text
from transforms.types import DELTA, Chunk, Dropped

NGRAM = 4
COVERAGE = 0.8
MIN_DELTA_WORDS = 3
DELTA_SEPARATOR = '~delta'

COUNTER_NAMESPACE = 'deltas'
COUNTER_SOURCES = 'near_duplicates'
COUNTER_DELTAS = 'deltas'
COUNTER_EMBEDDED = 'embedded'
COUNTER_MERGED = 'merged'

# A sentence ends after . ! ? (and one closing quote or bracket) before whitespace, or at a line break.
_SENTENCE_BREAK = re.compile(r'(?:(?<=[.!?])|(?<=[.!?]["\'\)\]]))\s+|\s*\n\s*')
# Words and numbers; "15.1.0" and "utf-8" stay one token, so a changed version is one changed token.
_TOKEN = re.compile(r'\w(?:[\w.\-]*\w)?')


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """`(start, end)` of each sentence of `text`, stripped of surrounding whitespace, in order."""
    spans = []
    start = 0
    for match in _SENTENCE_BREAK.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    out = []
    for s, e in spans:
        piece = text[s:e]
        stripped = piece.strip()
        if stripped:
            s += len(piece) - len(piece.lstrip())
            out.append((s, s + len(stripped)))
    return out


def tokens(text: str) -> list[str]:
    """Normalized word tokens (NFKC, casefolded; see `text.normalize_text`)."""
    return _TOKEN.findall(normalize_text(text))


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def is_covered(sentence: Sequence[str], keeper_sentences: Sequence[Sequence[str]]) -> bool:
    """Whether a keeper sentence holds >= COVERAGE of `sentence`'s n-grams and all its digit tokens.

    Args:
      sentence: Tokens of one sentence of the dropped chunk (`tokens`).
      keeper_sentences: Tokens of each sentence of the keeper.

    Returns:
      True when nothing of the sentence is news; always for a sentence without tokens.
    """
    if not sentence:
        return True
    n = min(NGRAM, len(sentence))
    grams = _ngrams(sentence, n)
    numbers = {t for t in sentence if any(ch.isdigit() for ch in t)}
    for other in keeper_sentences:
        if len(other) < n or not numbers <= set(other):
            continue
        if len(grams & _ngrams(other, n)) >= COVERAGE * len(grams):
            return True
    return False


def novel_spans(text: str, keeper_text: str) -> list[tuple[int, int]]:
    """Spans of `text` made of adjacent sentences the keeper does not cover.

    Returns:
      `(start, end)` offsets into `text`, one per run of adjacent novel
      sentences (from the first one's start to the last one's end), keeping
      only runs of at least MIN_DELTA_WORDS tokens.
    """
    keeper = [tokens(keeper_text[s:e]) for s, e in sentence_spans(keeper_text)]
    runs: list[list[int]] = []
    previous_novel = False
    for s, e in sentence_spans(text):
        novel = not is_covered(tokens(text[s:e]), keeper)
        if novel and previous_novel:
            runs[-1][1] = e
        elif novel:
            runs.append([s, e])
        previous_novel = novel
    return [(s, e) for s, e in runs if len(tokens(text[s:e])) >= MIN_DELTA_WORDS]


def delta_chunks(dropped: Dropped, keeper_text: str) -> list[Chunk]:
    """The delta chunks of a near-duplicate, against the text of the chunk it was dropped for.

    Returns:
      Chunks `{chunk_id}~delta{k}` with the dropped chunk's doc_id,
      chunk_index and metadata, exact offsets into its document,
      `kind='delta'` and `delta_of` = the direct keeper (the build then
      resolves it to the final one, `transforms.lineage`); no embedding and
      n_tokens 0 until `EmbedDeltas`.
    """
    chunk = dropped.chunk
    out = []
    for k, (s, e) in enumerate(novel_spans(chunk.text, keeper_text)):
        text = chunk.text[s:e]
        out.append(Chunk(
            chunk_id=f'{chunk.chunk_id}{DELTA_SEPARATOR}{k}',
            doc_id=chunk.doc_id,
            chunk_index=chunk.chunk_index,
            text=text,
            char_start=chunk.char_start + s,
            char_end=chunk.char_start + e,
            n_tokens=0,
            content_hash=content_hash(text),
            metadata=chunk.metadata,
            kind=DELTA,
            delta_of=dropped.duplicate_of,
        ))
    return out


def merge_equal_deltas(deltas: Iterable[Chunk]) -> list[Chunk]:
    """Keeps one delta per normalized text among the deltas against one keeper.

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


def _keeper_text(chunk: Chunk) -> tuple[str, str]:
    return chunk.chunk_id, chunk.text


def _keyed_by_keeper(dropped: Dropped) -> tuple[str, Dropped]:
    # Only the text, offsets and metadata are needed: the features would only weigh on the shuffle.
    light = dataclasses.replace(dropped.chunk, embedding=None, minhash=None, entities=None)
    return dropped.duplicate_of, dataclasses.replace(dropped, chunk=light)


def _is_delta_source(dropped: Dropped, reasons: frozenset) -> bool:
    return dropped.reason in reasons and dropped.duplicate_of is not None


class _DeltasOfKeeperFn(beam.DoFn):
    """One keeper's text and its near-duplicates -> their delta chunks, equal ones merged."""

    def setup(self):
        self._sources = Metrics.counter(COUNTER_NAMESPACE, COUNTER_SOURCES)
        self._deltas = Metrics.counter(COUNTER_NAMESPACE, COUNTER_DELTAS)
        self._merged = Metrics.counter(COUNTER_NAMESPACE, COUNTER_MERGED)

    def process(self, element):
        _, grouped = element
        texts = list(grouped['keeper'])
        if not texts:
            return
        found = []
        for dropped in grouped['dropped']:
            found.extend(delta_chunks(dropped, texts[0]))
            self._sources.inc()
        kept = merge_equal_deltas(found)
        self._deltas.inc(len(kept))
        self._merged.inc(len(found) - len(kept))
        yield from kept


class ExtractDeltas(beam.PTransform):
    """Delta chunks of the near-duplicate drops.

    Input: a dict with 'chunks' (PCollection[Chunk]: every chunk before
    filtering, so the keeper's text is found whichever filter dropped its
    duplicate) and 'dropped' (PCollection[Dropped]). Output:
    PCollection[Chunk] of kind delta, not embedded. The keeper's text reaches
    its duplicates through a CoGroupByKey on the keeper's chunk_id.
    """

    def __init__(self, semantic: bool = False):
        super().__init__()
        self._reasons = registry.delta_reasons(semantic)

    def expand(self, pcolls):
        texts = pcolls['chunks'] | 'KeyKeeperTexts' >> beam.Map(_keeper_text)
        near = (
            pcolls['dropped']
            | 'SelectNearDuplicates' >> beam.Filter(_is_delta_source, self._reasons)
            | 'KeyByKeeper' >> beam.Map(_keyed_by_keeper)
        )
        return (
            {'keeper': texts, 'dropped': near}
            | 'JoinKeeperText' >> beam.CoGroupByKey()
            | 'NovelSentences' >> beam.ParDo(_DeltasOfKeeperFn())
        )


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


def resolve_delta_of(delta: Chunk, final_keeper: Optional[str]) -> Chunk:
    """The delta pointing at the kept chunk representing its source (None when none does)."""
    return dataclasses.replace(delta, delta_of=final_keeper)
