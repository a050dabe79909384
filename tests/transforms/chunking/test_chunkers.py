"""Chunkers: exact offsets, size bounds and overlap, with the real MiniLM tokenizer."""

import pytest

from tests.helpers import ORBITS, PASTA
from transforms.chunking.chunkers import (
    MAX_CHARS_PER_TOKEN,
    MAX_CHUNK_SIZE,
    ChunkerConfig,
    TokenIndex,
    bound_spans,
    chunk_spans,
    max_chunk_chars,
    split_fixed,
    split_recursive,
    token_offsets,
)


@pytest.fixture(scope='module')
def tokenizer():
    from transformers import AutoTokenizer

    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, resolve_model_path

    return AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_EMBEDDING_MODEL))


def spans_of(tokenizer, text, name, size, overlap):
    tokens = TokenIndex(token_offsets(tokenizer, text))
    return tokens, chunk_spans(text, tokens, ChunkerConfig(name, size, overlap))


TEXT = '# Title\n\n' + PASTA * 6 + '\n\n' + ORBITS * 6 + '\nLast line without a full stop'


@pytest.mark.parametrize('name', ['fixed', 'recursive'])
@pytest.mark.parametrize('size,overlap', [(16, 0), (40, 10), (400, 200)])
def test_spans_are_exact_nonempty_and_bounded(tokenizer, name, size, overlap):
    tokens, spans = spans_of(tokenizer, TEXT, name, size, overlap)
    assert spans
    for start, end in spans:
        chunk = TEXT[start:end]
        assert chunk and chunk == chunk.strip()
        assert tokens.count(start, end) <= size
    assert spans == sorted(spans)
    # Together the chunks cover every token of the document.
    covered = {i for s, e in spans for i, t in enumerate(tokens.starts) if s <= t < e}
    assert covered == set(range(len(tokens)))


def test_fixed_windows_overlap_by_exactly_overlap_tokens(tokenizer):
    tokens, spans = spans_of(tokenizer, TEXT, 'fixed', 30, 10)
    for (s1, e1), (s2, e2) in zip(spans, spans[1:-1]):
        assert tokens.count(s2, e1) == 10
        assert tokens.count(s1, e1) == 30


def test_recursive_overlap_is_whole_trailing_pieces(tokenizer):
    text = ' '.join(f'Sentence number {i} says something short.' for i in range(40))
    tokens, spans = spans_of(tokenizer, text, 'recursive', 40, 15)
    assert len(spans) > 3
    for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
        assert s1 < s2 < e1  # consecutive chunks overlap...
        assert text[s2:e1].startswith('Sentence')  # ...by whole sentences
        assert tokens.count(s2, e1) <= 15


def test_recursive_prefers_paragraphs_then_sentences(tokenizer):
    text = 'First paragraph is short.\n\nSecond paragraph is also short.'
    _, spans = spans_of(tokenizer, text, 'recursive', 8, 0)
    assert [text[s:e] for s, e in spans] == ['First paragraph is short.', 'Second paragraph is also short.']


@pytest.mark.parametrize('name', ['fixed', 'recursive'])
def test_empty_and_whitespace_text_give_no_chunks(tokenizer, name):
    for text in ['', '   \n\n\t ']:
        assert spans_of(tokenizer, text, name, 10, 0)[1] == []


@pytest.mark.parametrize('name', ['fixed', 'recursive'])
def test_one_token_document(tokenizer, name):
    assert spans_of(tokenizer, '  hello\n', name, 10, 2)[1] == [(2, 7)]


@pytest.mark.parametrize('name', ['fixed', 'recursive'])
def test_very_long_word_is_split_between_tokens(tokenizer, name):
    text = 'start ' + 'abcdefghij' * 9 + ' end'  # 90 letters: many word pieces
    tokens, spans = spans_of(tokenizer, text, name, 8, 0)
    assert len(spans) > 2
    assert all(tokens.count(s, e) <= 8 for s, e in spans)
    assert ''.join(text[s:e] for s, e in spans).replace(' ', '') == text.replace(' ', '')


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match='chunk_size'):
        ChunkerConfig('fixed', 0, 0)
    with pytest.raises(ValueError, match='chunk_overlap'):
        ChunkerConfig('recursive', 100, 100)
    with pytest.raises(ValueError, match='unknown chunker'):
        ChunkerConfig('sentences', 100, 0)
    with pytest.raises(ValueError, match='chunk_overlap'):
        split_fixed('a b', TokenIndex([(0, 1), (2, 3)]), 2, -1)
    with pytest.raises(ValueError, match='chunk_size'):
        split_recursive('a b', TokenIndex([(0, 1), (2, 3)]), -5, 0)
    for name in ('fixed', 'cluster_semantic'):
        assert ChunkerConfig(name, MAX_CHUNK_SIZE).chunk_size == 8192
        with pytest.raises(ValueError, match=r'chunk_size must be <= 8192 tokens, got 1000000000'):
            ChunkerConfig(name, 10**9)


def test_token_index_counts_overlapping_tokens():
    tokens = TokenIndex([(0, 3), (4, 7), (0, 0), (8, 12)])  # (0, 0): a special token
    assert len(tokens) == 3
    assert tokens.count(0, 12) == 3
    assert tokens.count(5, 9) == 2
    assert tokens.count(3, 4) == 0
    assert tokens.boundaries(0, 12) == [4, 8]


@pytest.mark.parametrize('name', ['fixed', 'recursive'])
def test_no_chunk_exceeds_the_character_bound(tokenizer, name):
    # BERT's tokenizer makes a 50,000-letter "word" one [UNK] token; a long run
    # of spaces holds no token at all. Both must still be cut.
    text = 'Start. ' + 'a' * 50_000 + ' middle' + ' ' * 5_000 + 'end of text.'
    tokens, spans = spans_of(tokenizer, text, name, 32, 0)
    bound = max_chunk_chars(32)
    assert bound == 32 * MAX_CHARS_PER_TOKEN
    assert all(0 < e - s <= bound for s, e in spans)
    assert all(text[s:e] == text[s:e].strip() for s, e in spans)
    # Every letter of the text is in some chunk.
    covered = set()
    for s, e in spans:
        covered.update(range(s, e))
    assert all(i in covered for i, c in enumerate(text) if not c.isspace())


def test_bound_spans_cuts_at_whitespace_when_it_can():
    assert bound_spans('aaaa bbbb cccc', [(0, 14)], 10) == [(0, 9), (10, 14)]
    assert bound_spans('abcdefghij', [(0, 10)], 4) == [(0, 4), (4, 8), (8, 10)]
    assert bound_spans('short', [(0, 5)], 10) == [(0, 5)]
