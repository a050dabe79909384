"""Sentences of a text as a reader sees them: exact spans, one pass, no model.

A delta is only useful if it is a sentence a reader would recognise, so the
unit is not a line. Lines are first joined into blocks the way a reader
joins them, then each block is cut after `.`, `!` or `?`:

- a line break inside a paragraph is a space. Hard-wrapped text (plain-text
  docs, RFCs, mailing lists, much Markdown) breaks lines at ~75 characters
  in the middle of sentences, and a sentence cut there loses its subject;
- a blank line, a heading (`#`, a wikitext `= = Title = =`, a rule or a
  setext underline), a list item, a table row, a fence and every code line
  (fenced, or indented by 4 after a blank line) start a new block;
- a break after a short line is a boundary too (`soft_break`): a wrapping
  editor ends a line early only when the next word does not fit, so a line
  that leaves room for it ended on purpose (a plain-text heading such as
  "Introduction", a line of a metadata header, a paragraph that is one
  line, as in the wikitexts corpus).

Inside a block a sentence ends after `.`, `!` or `?` (and any closing quotes
or brackets) before whitespace, except after a one-letter initial ("P.
falciparum", "J. Smith") or a title ("Mr.", "Dr.", "e.g."): their next word
is rarely a new sentence. `benchmarks/studies/sentence_segmenters.py` measures the
rules against spaCy's rule-based sentencizer on a labelled sample.

Every span indexes its input (`text[start:end]` is the sentence, stripped),
spans are in order and disjoint, and the cost is linear in the text.

The coverage rule that deltas and the build's audit share lives here too: a
sentence is *covered* when one sentence of the kept text holds at least
`COVERAGE` (80%) of its word n-grams (n = 4, or the sentence's length when
shorter) **and** every token of it that contains a digit. The digit clause
is the justified addition to the 80% rule: in a sentence of 23 words or
more, changing "Unicode 15.0.0" to "15.1.0" touches at most 4 of its
4-grams, so the n-gram rule alone would call it covered and lose exactly
the news.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from typing import Iterator, Optional, Sequence

from transforms.text import content_hash, normalize_text

Span = tuple[int, int]

NGRAM = 4
COVERAGE = 0.8

# A soft break needs the line to reach this share of the block's widest line
# (or the next word not to fit): ragged right margins (hand-wrapped mail,
# optimal-fit wrappers) end lines a little before the width.
SOFT_WIDTH_SHARE = 0.75

_HEADING = re.compile(r'\s{0,3}#{1,6}(?:\s|$)|\s*=+\s.*\s=+\s*$')
_RULE = re.compile(r'\s{0,3}(?:(?:[-*_]\s*){3,}|=+)\s*$')
_ITEM = re.compile(r'\s*(?:[-*+\u2022\u2013]|\d{1,3}[.)]|[a-zA-Z][)])\s+\S')
_FENCE = re.compile(r'\s{0,3}(```|~~~)')
_INDENTED = re.compile(r'(?: {4}|\t)\s*\S')
_QUOTE = re.compile(r'\s{0,3}>')
# After . ! ? and any closing quotes or brackets, the whitespace before the next sentence.
_END = re.compile(r'[.!?]+["\'\u201d\u2019)\]]*(\s+)')
# Words before a dot that ends no sentence: titles and Latin abbreviations (one-letter initials too).
_NO_END = frozenset({'mr', 'mrs', 'ms', 'dr', 'prof', 'sr', 'jr', 'st', 'vs', 'cf', 'fig', 'figs', 'eq',
                     'e.g', 'i.e', 'al', 'approx'})
_OPENERS = '([{"\'\u201c\u2018'

# Words and numbers; "15.1.0" and "utf-8" stay one token, so a changed version is one changed token.
_TOKEN = re.compile(r'\w(?:[\w.\-]*\w)?')

BLANK, FENCE, CODE, HEADING, TABLE, ITEM, QUOTE, PROSE = 'blank fence code heading table item quote prose'.split()
# Kinds that a following prose line may continue: a wrapped paragraph, list item or quote.
_CONTINUED = (PROSE, ITEM, QUOTE)


def _lines(text: str) -> Iterator[tuple[int, int]]:
    """`(start, end)` of each line, without its line break."""
    start = 0
    while start <= len(text):
        end = text.find('\n', start)
        if end < 0:
            if start < len(text):
                yield start, len(text)
            return
        yield start, end
        start = end + 1


def line_kinds(lines: list[str]) -> list[str]:
    """The kind of each line (`BLANK`, `FENCE`, `CODE`, `HEADING`, `TABLE`, `ITEM`, `QUOTE`, `PROSE`)."""
    kinds = []
    fenced = False
    for line in lines:
        if _FENCE.match(line):
            kinds.append(FENCE)
            fenced = not fenced
        elif fenced:
            kinds.append(CODE)
        elif not line.strip():
            kinds.append(BLANK)
        elif _INDENTED.match(line) and (not kinds or kinds[-1] in (BLANK, CODE)) and _after_no_item(kinds):
            kinds.append(CODE)
        elif _HEADING.match(line) or _RULE.match(line):
            kinds.append(HEADING)
        elif line.lstrip().startswith('|') or ' | ' in line:
            kinds.append(TABLE)  # before ITEM: '- | amount' is a header row with an empty first cell
        elif _ITEM.match(line):
            kinds.append(ITEM)
        elif _QUOTE.match(line):
            kinds.append(QUOTE)
        else:
            kinds.append(PROSE)
    return kinds


def _after_no_item(kinds: list[str]) -> bool:
    # An indented paragraph after a list item and a blank line continues the item, it is no code.
    for kind in reversed(kinds):
        if kind != BLANK:
            return kind != ITEM
    return True


def soft_break(line: str, next_line: str, width: int) -> bool:
    """Whether the break between two lines of one block is a space to a reader.

    Args:
      line: The line before the break, without it.
      next_line: The line after it.
      width: The widest line of the block, standing in for the wrap width.
    """
    used = len(line.rstrip())
    next_word = len(next_line.split(None, 1)[0]) if next_line.strip() else 0
    return used + 1 + next_word > width or used >= SOFT_WIDTH_SHARE * width


def block_spans(text: str) -> list[Span]:
    """`(start, end)` of each block: lines a reader reads as one run of text."""
    lines = list(_lines(text))
    strings = [text[s:e] for s, e in lines]
    kinds = line_kinds(strings)
    blocks: list[list[int]] = []
    width = 0
    for i, (start, end) in enumerate(lines):
        kind = kinds[i]
        if kind == BLANK:
            width = 0
            continue
        if not width:  # the first line of a run of non-blank lines: measure the run
            j = i
            while j < len(lines) and kinds[j] != BLANK:
                width = max(width, len(strings[j].rstrip()))
                j += 1
        joined = (
            blocks and i > 0 and kinds[i - 1] in _CONTINUED and
            (kind == PROSE or kind == QUOTE == kinds[i - 1]) and
            soft_break(strings[i - 1], strings[i], width))
        if joined:
            blocks[-1][1] = end
        else:
            blocks.append([start, end])
    return [(s, e) for s, e in blocks]


def _ends_sentence(text: str, at: int, mark: int) -> bool:
    """Whether the `.`, `!` or `?` at `mark` ends the sentence that started at `at`."""
    if text[mark] != '.':
        return True
    word = mark
    while word > at and not text[word - 1].isspace() and text[word - 1] not in _OPENERS:
        word -= 1
    word_text = text[word:mark].lower()
    if word == at and len(word_text) <= 3 and word_text.isalnum():
        return False  # "2." or "b." alone: a list marker, the sentence is what follows
    return not ((len(word_text) == 1 and word_text.isalpha()) or word_text in _NO_END)


def _split_block(text: str, start: int, end: int) -> Iterator[Span]:
    at = start
    for match in _END.finditer(text, start, end):
        if not _ends_sentence(text, at, match.start()):
            continue
        yield at, match.start(1)
        at = match.end(1)
    yield at, end


def sentence_spans(text: str) -> list[Span]:
    """`(start, end)` of each sentence of `text` as a reader sees it, stripped, in order.

    Returns:
      Disjoint spans with `text[start:end]` the sentence; whitespace-only
      pieces are left out.
    """
    out = []
    for block_start, block_end in block_spans(text):
        for s, e in _split_block(text, block_start, block_end):
            piece = text[s:e]
            stripped = piece.strip()
            if stripped:
                s += len(piece) - len(piece.lstrip())
                out.append((s, s + len(stripped)))
    return out


class DocumentSentences:
    """A document's sentences, indexed so that those of any chunk of it are found in O(log n).

    A chunk is segmented with its document's sentences, not alone: alone, a
    chunk that starts inside a wrapped line, inside a fence or next to wider
    lines is read without the context that decides its boundaries.
    """

    def __init__(self, text: str):
        self.text = text
        self.spans = sentence_spans(text)
        self._starts = [s for s, _ in self.spans]
        self._ends = [e for _, e in self.spans]

    def around(self, at: int) -> Optional[Span]:
        """The sentence that offset `at` falls strictly inside, or None."""
        i = bisect.bisect_right(self._starts, at - 1) - 1
        return self.spans[i] if i >= 0 and self.spans[i][0] < at < self.spans[i][1] else None

    def clip(self, start: int, end: int) -> tuple[list[Span], bool, bool]:
        """The sentences a chunk `[start, end)` holds.

        Returns:
          `(spans, cut_start, cut_end)`: the sentences overlapping the chunk,
          clipped to it, as offsets into the chunk's text; whether the first
          one starts before the chunk, and whether the last one ends after it.
        """
        out = []
        cut_start = cut_end = False
        i = bisect.bisect_right(self._ends, start)
        while i < len(self.spans) and self.spans[i][0] < end:
            s, e = self.spans[i]
            cut_start = cut_start or s < start
            cut_end = e > end
            out.append((max(s, start) - start, min(e, end) - start))
            i += 1
        return out, cut_start, cut_end


def tokens(text: str) -> list[str]:
    """Normalized word tokens (NFKC, casefolded; see `text.normalize_text`)."""
    return _TOKEN.findall(normalize_text(text))


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclasses.dataclass(frozen=True)
class KeptText:
    """The sentences of a kept chunk as the coverage rule reads them.

    Attributes:
      whole: Tokens of each sentence the chunk holds whole.
      cut: Tokens of its first or last sentence when the chunker cut it
        there (the chunk starts or ends inside a sentence of its document):
        the rest of that sentence may be in no kept chunk, so it covers
        only a sentence whose n-grams it holds all of.
      content_hash: `text.content_hash` of its text.
    """

    whole: tuple[tuple[str, ...], ...]
    cut: tuple[tuple[str, ...], ...] = ()
    content_hash: Optional[str] = None

    @classmethod
    def of(cls, text: str, cut_start: bool = False, cut_end: bool = False,
           spans: Optional[Sequence[Span]] = None) -> KeptText:
        """The sentences of a kept chunk's `text`.

        Args:
          text: The chunk's text.
          cut_start: Whether its document's sentence goes on before the chunk.
          cut_end: Whether it goes on after the chunk.
          spans: The sentences, as offsets into `text` (`DocumentSentences.clip`);
            by default those of the text alone.
        """
        spans = sentence_spans(text) if spans is None else spans
        sentences = [tuple(tokens(text[s:e])) for s, e in spans]
        cut = {i for i, is_cut in ((0, cut_start), (len(sentences) - 1, cut_end)) if is_cut and sentences}
        return cls(tuple(t for i, t in enumerate(sentences) if i not in cut),
                   tuple(t for i, t in enumerate(sentences) if i in cut), content_hash(text))

    def holds(self, text_hash: str) -> bool:
        """Whether the kept chunk's normalized text is the one of `text_hash` (`text.content_hash`).

        A copy is covered whole, whatever its document's context makes of
        its sentences: an exact copy of a kept chunk never gives a delta.
        """
        return text_hash == self.content_hash


def is_covered(sentence: Sequence[str], kept: KeptText) -> bool:
    """Whether a kept sentence holds >= COVERAGE (a cut one: all) of `sentence`'s n-grams and its digit tokens.

    Args:
      sentence: Tokens of one sentence of a dropped chunk (`tokens`).
      kept: The sentences of the text that stays.

    Returns:
      True when nothing of the sentence is news; always for a sentence without tokens.
    """
    if not sentence:
        return True
    n = min(NGRAM, len(sentence))
    grams = _ngrams(sentence, n)
    numbers = {t for t in sentence if any(ch.isdigit() for ch in t)}
    for share, others in ((COVERAGE, kept.whole), (1.0, kept.cut)):
        for other in others:
            if len(other) < n or not numbers <= set(other):
                continue
            if len(grams & _ngrams(other, n)) >= share * len(grams):
                return True
    return False
