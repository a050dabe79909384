"""Word differences between a dropped chunk and its keeper."""

from transforms.report.words import tokens, word_diff


def marked(pieces):
    return [t.strip() for t, differs in pieces if differs]


def test_only_the_differing_words_are_marked():
    left, right = word_diff('Cook the pasta in plenty of salted water.', 'Cook the pasta in lots of salted water.')
    assert marked(left) == ['plenty'] and marked(right) == ['lots']


def test_the_pieces_rebuild_the_text():
    text = 'two  spaces\nand a line break '
    left, _ = word_diff(text, '')
    assert ''.join(t for t, _ in left) == text
    assert all(differs for _, differs in left)
    assert tokens('  lead') == [('lead', '')]


def test_frequent_words_are_not_junk_in_long_texts():
    # difflib's autojunk would ignore 'the' (over 1% of 200+ words) and mark every one of them.
    text = ' '.join(['the word'] * 150)
    left, right = word_diff(text, text + ' end')
    assert marked(left) == [] and marked(right) == ['end']
