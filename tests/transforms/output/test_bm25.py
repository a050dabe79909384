"""The BM25 files: deterministic, built in batches as at once, and scoring lexical matches (none without a term)."""

import pytest

from transforms.output.bm25 import bm25_files, bm25_files_of_batches, bm25_tokenize
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
