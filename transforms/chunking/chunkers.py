"""Chunkers: pure functions from a document's text to exact character spans.

Sizes are counted in tokens of the embedding model's tokenizer. Every chunker
returns `(char_start, char_end)` spans with `text[char_start:char_end]` equal to
the chunk text, never re-joined strings, so evaluation can map chunks back to
the source. Spans never start or end with whitespace and are never empty.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from typing import Callable, Sequence

from transforms.features.models import tokenize

Span = tuple[int, int]

# Separators are regular expressions tried in order; a piece starts where its
# separator matched (the separator travels with the text after it). The last
# level, None, splits between tokens, the smallest unit sizes are counted in.
SENTENCE_END = r'(?<=[.!?])\s+'
DEFAULT_SEPARATORS: tuple[str | None, ...] = ('\n\n', '\n', SENTENCE_END, ' ', None)

FIXED = 'fixed'
RECURSIVE = 'recursive'
# Semantic chunkers live in semantic_chunking.py; their names are here so a
# config can be validated without loading a model.
CLUSTER_SEMANTIC = 'cluster_semantic'
SEMANTIC_BREAKPOINT = 'semantic_breakpoint'
SEMANTIC_CHUNKERS = (CLUSTER_SEMANTIC, SEMANTIC_BREAKPOINT)
# Chunks are also capped in characters: one token can be arbitrarily long
# (BERT's tokenizer makes a whole 50,000-letter "word" one [UNK]) and the
# whitespace between tokens counts for none. 16 is ~4x an English token.
MAX_CHARS_PER_TOKEN = 16
# The largest `--chunk_size`: 32 times what all-MiniLM-L6-v2 embeds (256 tokens). It also bounds
# what one run of `cluster_semantic`'s segmentation may span, and so its time per piece.
MAX_CHUNK_SIZE = 8192
_WHITESPACE_RUN = re.compile(r'\s+')


class TokenIndex:
    """Token offsets of one document; counts the tokens of any span in O(log n).

    A token counts for a span when it overlaps it, so the counts of adjacent
    spans add up to at least the count of their union: bounds checked on pieces
    hold for the merged chunk.
    """

    def __init__(self, offsets: Sequence[Span]):
        # Tokenizers give (0, 0) for tokens with no source text; they take no room.
        kept = [(s, e) for s, e in offsets if e > s]
        self.starts = [s for s, _ in kept]
        self.ends = [e for _, e in kept]

    def __len__(self) -> int:
        return len(self.starts)

    def count(self, start: int, end: int) -> int:
        """Returns how many tokens overlap `[start, end)`."""
        if end <= start:
            return 0
        return max(0, bisect.bisect_left(self.starts, end) - bisect.bisect_right(self.ends, start))

    def boundaries(self, start: int, end: int) -> list[int]:
        """Returns the token starts strictly inside `(start, end)`."""
        lo = bisect.bisect_right(self.starts, start)
        hi = bisect.bisect_left(self.starts, end)
        return self.starts[lo:hi]


def token_offsets(tokenizer, text: str) -> list[Span]:
    """Returns the character offsets of `text`'s tokens, without special tokens.

    Args:
      tokenizer: A Hugging Face fast tokenizer (the embedding model's).
      text: The document text; it is never truncated here.
    """
    encoding = tokenize(
        tokenizer, text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False
    )
    return list(encoding['offset_mapping'])


def strip_span(text: str, start: int, end: int) -> Span:
    """Shrinks `[start, end)` until it neither starts nor ends with whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def max_chunk_chars(chunk_size: int) -> int:
    """The most characters a chunk of `chunk_size` tokens may span."""
    return chunk_size * MAX_CHARS_PER_TOKEN


def bound_spans(text: str, spans: Sequence[Span], max_chars: int) -> list[Span]:
    """Cuts every span longer than `max_chars` characters into pieces that are not.

    A span is cut at the last whitespace within the limit, or, with none
    there, at the limit itself, inside a token. Pieces are stripped of
    whitespace like every span.
    """
    out = []
    for start, end in spans:
        while end - start > max_chars:
            limit = start + max_chars
            cut = limit
            for m in _WHITESPACE_RUN.finditer(text, start + 1, limit + 1):
                cut = m.start()
            piece = strip_span(text, start, cut)
            if piece[1] > piece[0]:
                out.append(piece)
            start, end = strip_span(text, cut, end)
        if end > start:
            out.append((start, end))
    return out


def split_fixed(text: str, tokens: TokenIndex, size: int, overlap: int) -> list[Span]:
    """Windows of `size` tokens, each starting `size - overlap` tokens after the last.

    Args:
      text: The document text.
      tokens: Its token index.
      size: Tokens per window, > 0.
      overlap: Tokens shared by consecutive windows, in `[0, size)`.

    Returns:
      One span per window, from its first token's start to its last token's end.
    """
    _check_sizes(size, overlap)
    n = len(tokens)
    spans = []
    step = size - overlap
    for first in range(0, n, step):
        last = min(first + size, n) - 1
        spans.append((tokens.starts[first], tokens.ends[last]))
        if last == n - 1:
            break
    return spans


def split_recursive(
    text: str,
    tokens: TokenIndex,
    size: int,
    overlap: int,
    separators: Sequence[str | None] = DEFAULT_SEPARATORS,
) -> list[Span]:
    """Recursive splitting: coarse separators first, finer ones only where needed.

    The text is cut at the first separator that occurs in it; a piece still over
    `size` tokens is cut again with the next separators. Pieces are then merged
    in order into chunks of at most `size` tokens; a new chunk starts with the
    previous chunk's trailing whole pieces, up to `overlap` tokens.

    Args:
      text: The document text.
      tokens: Its token index.
      size: Maximum tokens per chunk, > 0.
      overlap: Maximum tokens repeated from the previous chunk, in `[0, size)`.
      separators: Regular expressions, coarse to fine; None splits between tokens.

    Returns:
      The chunk spans, in document order.
    """
    _check_sizes(size, overlap)
    compiled = [None if sep is None else re.compile(sep) for sep in separators]
    start, end = strip_span(text, 0, len(text))
    pieces = _split(text, tokens, start, end, size, compiled)
    return _merge(text, tokens, pieces, size, overlap)


def _split(text, tokens, start, end, size, separators) -> list[Span]:
    if tokens.count(start, end) <= size or not separators:
        return [(start, end)]
    sep, finer = separators[0], separators[1:]
    if sep is None:
        cuts = tokens.boundaries(start, end)
    else:
        cuts = [m.start() for m in sep.finditer(text, start, end) if start < m.start() < end]
    if not cuts:
        return _split(text, tokens, start, end, size, finer)
    pieces = []
    for s, e in zip([start] + cuts, cuts + [end]):
        if tokens.count(s, e) <= size:
            pieces.append((s, e))
        else:
            pieces.extend(_split(text, tokens, s, e, size, finer))
    return pieces


def _merge(text, tokens, pieces, size, overlap) -> list[Span]:
    spans: list[Span] = []
    window: list[tuple[int, int, int]] = []
    total = 0

    def emit():
        span = strip_span(text, window[0][0], window[-1][1])
        if span[1] > span[0] and (not spans or spans[-1] != span):
            spans.append(span)

    for s, e in pieces:
        n = tokens.count(s, e)
        if window and total + n > size:
            emit()
            while window and (total > overlap or total + n > size):
                total -= window.pop(0)[2]
        window.append((s, e, n))
        total += n
    if window:
        emit()
    return spans


def _check_sizes(size: int, overlap: int) -> None:
    if size <= 0:
        raise ValueError(f'chunk_size must be > 0, got {size}')
    if not 0 <= overlap < size:
        raise ValueError(f'chunk_overlap must be in [0, chunk_size={size}), got {overlap}')


@dataclasses.dataclass(frozen=True)
class ChunkerConfig:
    """How documents are cut into chunks.

    Attributes:
      name: `fixed` (token windows), `recursive` (separator hierarchy),
        `cluster_semantic` or `semantic_breakpoint` (see semantic_chunking.py).
      chunk_size: Maximum tokens per chunk (default 400, as in the study), at
        most MAX_CHUNK_SIZE; the target average for `semantic_breakpoint`.
      chunk_overlap: Tokens shared with the previous chunk (default 0); must be
        0 for the semantic chunkers, whose chunks never overlap.
      params: The chunker's own integer parameters as sorted `(key, value)`
        pairs, among `CHUNKER_PARAMS[name]` (e.g. `(('window', 3),)` for
        `semantic_breakpoint`); empty for the defaults.
    """

    name: str = RECURSIVE
    chunk_size: int = 400
    chunk_overlap: int = 0
    params: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        if self.name not in CHUNKERS:
            raise ValueError(f'unknown chunker {self.name!r}; choose one of {list(CHUNKERS)}')
        _check_sizes(self.chunk_size, self.chunk_overlap)
        if self.chunk_size > MAX_CHUNK_SIZE:
            raise ValueError(f'chunk_size must be <= {MAX_CHUNK_SIZE} tokens, got {self.chunk_size}: a model embeds '
                             'a chunk\'s first few hundred tokens only (256 for all-MiniLM-L6-v2)')
        if self.is_semantic and self.chunk_overlap:
            raise ValueError(f'chunk_overlap must be 0 for the {self.name} chunker')
        allowed = CHUNKER_PARAMS.get(self.name, ())
        keys = [k for k, _ in self.params]
        unknown = sorted(set(keys) - set(allowed))
        if unknown:
            raise ValueError(f'unknown parameters {unknown} for the {self.name} chunker; '
                             f'it takes {list(allowed) or "none"}')
        if keys != sorted(set(keys)):
            raise ValueError(f'chunker parameters must be sorted and unique, got {keys}')
        bad = [f'{k}={v}' for k, v in self.params if not isinstance(v, int) or v <= 0]
        if bad:
            raise ValueError(f'chunker parameters must be positive integers, got {bad}')

    def param(self, key: str):
        """The value of one of the chunker's own parameters; None for its default."""
        return dict(self.params).get(key)

    @property
    def is_semantic(self) -> bool:
        """Whether chunk boundaries come from embeddings (needs the model)."""
        return self.name in SEMANTIC_CHUNKERS


Splitter = Callable[[str, TokenIndex, int, int], list[Span]]
SPLITTERS: dict[str, Splitter] = {FIXED: split_fixed, RECURSIVE: split_recursive}
CHUNKERS = (FIXED, RECURSIVE) + SEMANTIC_CHUNKERS
# Each chunker's own parameters (see ChunkerConfig.params), with what they mean:
# `piece`: tokens per piece the semantic chunkers group (semantic_chunking.PIECE_SIZE);
# `window`: neighbours on each side of a piece in a breakpoint window (WINDOW_BUFFER).
CHUNKER_PARAMS = {
    CLUSTER_SEMANTIC: ('piece',),
    SEMANTIC_BREAKPOINT: ('piece', 'window'),
}


def chunk_spans(text: str, tokens: TokenIndex, config: ChunkerConfig) -> list[Span]:
    """Returns the chunk spans of `text` for a token-based chunker, at most `max_chunk_chars` long."""
    spans = SPLITTERS[config.name](text, tokens, config.chunk_size, config.chunk_overlap)
    return bound_spans(text, spans, max_chunk_chars(config.chunk_size))

