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
is rarely a new sentence. `benchmarks/sentence_segmenters.py` measures the
rules against spaCy's rule-based sentencizer on a labelled sample.

Every span indexes its input (`text[start:end]` is the sentence, stripped),
spans are in order and disjoint, and the cost is linear in the text.
"""

from __future__ import annotations

import re
from typing import Iterator

Span = tuple[int, int]

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
