"""Lemma tables: blank-line blocks, tokens by span, and the real spaCy lemmatizer."""

import pytest

from transforms.evaluation.lemmas import LemmaTable, lemma_tables, load_lemmatizer, text_blocks


def test_text_blocks_cut_at_blank_lines_with_exact_offsets():
    text = 'One two.\n\nThree four.\n \nFive'
    blocks = text_blocks(text)
    assert [text[s:e] for s, e in blocks] == ['One two.', 'Three four.', 'Five']
    long = 'word ' * 50
    assert ''.join(long[s:e] for s, e in text_blocks(long, max_chars=23)) == long


def test_lemma_table_spans_take_tokens_starting_inside():
    table = LemmaTable(starts=(0, 4, 10), lemmas=('cat', 'run', 'cat'))
    assert table.tokens(0, 5) == {'cat', 'run'}
    assert table.tokens(5, 10) == frozenset()
    assert table.spans_tokens([(0, 1), (10, 11)]) == {'cat'}


@pytest.fixture(scope='module')
def lemmatizer():
    return load_lemmatizer()


def test_lemma_tables_lemmatize_and_drop_stopwords(lemmatizer):
    text = 'The cats were running home.\n\nMice ran, too.'
    (table,) = lemma_tables(lemmatizer, [text])
    assert table.tokens(0, len(text)) >= {'cat', 'run', 'home', 'mouse'}
    assert not table.tokens(0, len(text)) & {'the', 'be', 'were', 'too', ','}
    # Offsets index the document, across the blank-line blocks.
    assert table.tokens(text.index('Mice'), len(text)) == {'mouse', 'run'}


def test_load_lemmatizer_unknown_model():
    with pytest.raises(ValueError, match='cannot load spaCy model'):
        load_lemmatizer('no_such_spacy_model_xyz')
