"""Word-level differences between a dropped chunk and its keeper, for the report's side-by-side view."""

from __future__ import annotations

import difflib
import re

# A word with the whitespace after it, so a text is rebuilt exactly from its tokens.
_TOKEN = re.compile(r'(\S+)(\s*)')


def tokens(text: str) -> list[tuple[str, str]]:
    """`(word, whitespace after it)` pairs; leading whitespace is dropped."""
    return _TOKEN.findall(text)


def word_diff(left: str, right: str) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """Each side as `(word and its whitespace, differs)` pieces.

    A word differs when it is not part of the longest matching blocks of the
    two word sequences (difflib, without its junk heuristic, which would hide
    frequent words in long texts).
    """
    a, b = tokens(left), tokens(right)
    matcher = difflib.SequenceMatcher(None, [w for w, _ in a], [w for w, _ in b], autojunk=False)
    same_a, same_b = set(), set()
    for block in matcher.get_matching_blocks():
        same_a.update(range(block.a, block.a + block.size))
        same_b.update(range(block.b, block.b + block.size))
    return ([(w + s, i not in same_a) for i, (w, s) in enumerate(a)],
            [(w + s, i not in same_b) for i, (w, s) in enumerate(b)])
