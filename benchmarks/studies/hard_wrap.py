"""Hard-wrapping for the benchmarks: long prose lines broken at ~75 characters, as plain-text docs are.

`hard_wrap` replaces spaces by line breaks and nothing else, so the text
keeps its length and every offset into it (a labelled boundary, a sentence)
stays valid. It wraps greedily, as `fmt`, Emacs and `textwrap` do, and
leaves alone what a wrapping tool leaves alone: table rows (a `|` cell
separator), fenced code and lines indented by 4 or a tab.
"""

WIDTH = 75


def _wrappable(line: str) -> bool:
    return not (' | ' in line or line.lstrip().startswith('|') or line.startswith(('    ', '\t')))


def hard_wrap(text: str, width: int = WIDTH) -> str:
    """`text` with every prose line longer than `width` broken at spaces, greedily; same length."""
    out = list(text)
    fenced = False
    start = 0
    for line in text.split('\n'):
        end = start + len(line)
        if line.lstrip().startswith(('```', '~~~')):
            fenced = not fenced
        elif not fenced and len(line) > width and _wrappable(line):
            line_start, space = start, None
            for i in range(start, end):
                if text[i] == ' ' and i > line_start:
                    space = i
                if i - line_start >= width and space is not None:
                    out[space] = '\n'
                    line_start, space = space + 1, None
        start = end + 1
    return ''.join(out)
