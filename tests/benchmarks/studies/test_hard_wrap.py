"""Hard-wrapping keeps every offset: spaces become line breaks, tables and code stay as they are."""

from benchmarks.studies.hard_wrap import hard_wrap

PARAGRAPH = ('The toolkit reads documents in many formats and writes them back without losing a '
             'character of their layout, and a reader who opens the result sees the same page. ') * 3


def test_long_prose_lines_are_wrapped_greedily_without_moving_a_character():
    text = PARAGRAPH + '\n\n| a long table row | ' + 'x ' * 60 + '|\n```\n' + 'code ' * 30 + '\n```\n    ' + 'y ' * 50
    wrapped = hard_wrap(text)
    assert len(wrapped) == len(text)
    assert all(a == b or (a, b) == (' ', '\n') for a, b in zip(text, wrapped))
    prose = wrapped[:len(PARAGRAPH)].split('\n')
    assert len(prose) > 3 and all(len(line) <= 75 for line in prose)
    # Greedy: the first word of each line would not have fit on the line before it.
    assert all(len(a) + 1 + len(b.split()[0]) > 75 for a, b in zip(prose, prose[1:]))
    assert wrapped[len(PARAGRAPH):] == text[len(PARAGRAPH):]
