"""Text keys: the exact text a cached feature belongs to."""

from transforms.text import text_key


def test_text_key_is_exact():
    assert text_key('Café') != text_key('café')
    assert text_key('a b') != text_key('a  b')
    assert text_key('x') == text_key('x') and len(text_key('x')) == 32
