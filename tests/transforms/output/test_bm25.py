"""The BM25 files: deterministic, built in batches as at once, streamed as bm25s saves them, scoring lexical matches."""

import contextlib
import io
import random

import numpy as np
import pytest

from transforms.output.bm25 import (BM25_BLOCK_ENTRIES, bm25_files, bm25_files_of_batches, bm25_tokenize,
                                    column_blocks, write_bm25_files)
from transforms.query import retrieval
from transforms.query.retriever import load_bm25


def test_bm25_files_are_deterministic_and_score_lexical_matches(tmp_path):
    import bm25s

    texts = ['Cook the pasta in salted water.', 'A satellite in low Earth orbit.', 'The orbit burn.']
    files = bm25_files(texts)
    assert files == bm25_files(texts)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    index = bm25s.BM25.load(str(tmp_path), show_progress=False)
    tokens = bm25_tokenize(['orbit of a satellite'], return_ids=False)[0]
    scores = retrieval.bm25_scores(index, tokens, len(texts))
    assert scores[0] == 0 and scores[1] > scores[2] > 0
    assert not retrieval.bm25_scores(index, [], len(texts)).any()
    with pytest.raises(ValueError, match='no texts'):
        bm25_files([])


def test_bm25_of_batches_equals_bm25_of_all_texts_at_once():
    texts = ['Cook the pasta in salted water.', 'A satellite in low Earth orbit.', 'The orbit burn.',
             'Salted water boils later.', '', 'Pasta, orbit, satellite: new words and old.']
    batched = bm25_files_of_batches([texts[:2], [], texts[2:5], texts[5:]])
    assert batched == bm25_files(texts)
    with pytest.raises(ValueError, match='no texts'):
        bm25_files_of_batches([[], []])


def test_bm25_of_texts_without_a_term_builds_and_scores_zero(tmp_path):
    # A corpus whose kept chunks are all stopwords or punctuation used to abort the build.
    for name, data in bm25_files(['!!!', 'The of and.']).items():
        (tmp_path / name).write_bytes(data)
    bm25 = load_bm25(str(tmp_path))
    tokens = bm25_tokenize(['pasta water'], return_ids=False)[0]
    assert retrieval.bm25_scores(bm25, tokens, 2).tolist() == [0.0, 0.0]


def streamed_files(batches, block_entries=BM25_BLOCK_ENTRIES):
    """`write_bm25_files` of `batches`, each file caught as bytes; and the documents it returned."""
    files = {}

    @contextlib.contextmanager
    def create(name):
        f = io.BytesIO()
        yield f
        files[name] = f.getvalue()

    documents = write_bm25_files(lambda: iter(batches), create, block_entries)
    return files, documents


def uneven_batches(seed=0):
    """Batches of 0 to 14 texts whose vocabulary grows batch by batch; some texts repeat, some have no term."""
    rng = random.Random(seed)
    batches = []
    for b in range(30):
        # Batch b draws from the first 10 + 3b words, the first ones most often: new tokens keep coming,
        # and the commonest are in more texts than a small merge block holds.
        words = [f'word{i}' for i in range(10 + 3 * b)]
        weights = [1 / (i + 1) for i in range(len(words))]
        texts = [' '.join(rng.choices(words + ['the', 'of'], weights + [1, 1], k=rng.randint(0, 12)))
                 for _ in range(rng.randint(0, 14))]
        if b % 7 == 3:
            texts += ['!!!', 'The of and.'] + texts[:3]
        batches.append(texts)
    return batches


@pytest.mark.parametrize('block_entries', [1, 3, 40, BM25_BLOCK_ENTRIES])
def test_streamed_files_equal_bm25s_in_memory_save(block_entries):
    batches = uneven_batches()
    expected = bm25_files_of_batches(batches)
    files, documents = streamed_files(batches, block_entries)
    assert documents == sum(map(len, batches))
    assert files.keys() == expected.keys()
    for name, data in expected.items():
        assert files[name] == data, name
    # The merge runs many blocks over many batches, some a token alone in more texts than a block holds.
    doc_freqs = np.diff(np.load(io.BytesIO(expected['indptr.csc.index.npy'])))
    assert len(column_blocks(doc_freqs, block_entries)) > (10 if block_entries <= 40 else 1)
    assert block_entries > 40 or doc_freqs.max() > block_entries


@pytest.mark.parametrize('batches', [
    [['A satellite in low Earth orbit.']],
    [['!!!'], ['The of and.', '']],
    [[], ['orbit orbit'], ['!!!'], []],
    [['same text'], ['same text'], ['same text']],
], ids=['one-text', 'no-term-at-all', 'one-term-then-none', 'repeated'])
def test_streamed_files_equal_bm25s_in_memory_save_in_special_cases(batches):
    files, documents = streamed_files(batches, block_entries=1)
    assert files == bm25_files_of_batches(batches)
    assert documents == sum(map(len, batches))


def test_column_blocks_hold_at_most_the_budget_or_one_column():
    assert column_blocks(np.array([3, 1, 1, 5, 0, 2]), 4).tolist() == [0, 2, 3, 4, 6]
    assert column_blocks(np.array([0]), 4).tolist() == [0, 1]


def test_streamed_files_refuse_no_texts_a_bad_block_and_texts_that_change():
    with pytest.raises(ValueError, match='no texts'):
        streamed_files([[], []])
    with pytest.raises(ValueError, match='block_entries'):
        streamed_files([['orbit']], block_entries=0)
    passes = iter([[['orbit', 'pasta']], [['orbit', 'pasta', 'water']]])
    with pytest.raises(RuntimeError, match='changed between the two passes'):
        write_bm25_files(lambda: next(passes), lambda name: io.BytesIO())
