"""Tests for the semantic chunkers: the pure DP and threshold, then the real model."""

import itertools
import re

import numpy as np
import pytest

from transforms.chunking.chunkers import (
    CLUSTER_SEMANTIC,
    SEMANTIC_BREAKPOINT,
    SEMANTIC_CHUNKERS,
    TokenIndex,
    token_offsets,
)
from transforms.chunking.semantic import (
    breakpoint_spans,
    breakpoint_threshold,
    centre_similarity,
    cluster_semantic_spans,
    embeddable_tokens,
    first_allowed_starts,
    optimal_segmentation,
    piece_spans,
    semantic_spans,
    window_texts,
)
from transforms.features.embedding import embed_texts
from transforms.features.models import load_embedding_model

PASTA = [
    'Bring a large pot of generously salted water to a rolling boil on the stove before you add any of the dried pasta to it.',
    'Stir the spaghetti often during the first minute of cooking so that the long strands of pasta do not stick together in a clump.',
    'Cook the noodles until they are al dente, which means tender but still slightly firm to the bite, usually about nine minutes.',
    'Save a full cup of the starchy pasta cooking water before you drain the spaghetti in a metal colander set in the kitchen sink.',
    'Meanwhile, warm a generous pour of good olive oil in a wide frying pan and gently fry thinly sliced garlic until it turns golden.',
    'Toss the drained pasta in the pan with the garlic oil, a pinch of chili flakes and a splash of the reserved cooking water.',
    'Keep tossing the noodles over low heat until the starchy water and the oil come together into a glossy sauce that coats them.',
    'Finish each plate of pasta at the table with freshly grated parmesan cheese, cracked black pepper and a few torn leaves of basil.',
]
ORBIT = [
    'A satellite in low Earth orbit circles the planet roughly once every ninety minutes at an altitude of a few hundred kilometres.',
    "Kepler's third law states that the square of the orbital period is proportional to the cube of the orbit's semi-major axis.",
    'To raise the far side of its orbit, a spacecraft fires its engine in the prograde direction at periapsis, the lowest point.',
    'A Hohmann transfer uses two separate engine burns to move a spacecraft between two circular orbits with the least propellant.',
    'The gravity of the planet constantly bends the trajectory of an orbiting spacecraft, so it falls around the Earth without landing.',
    'Geostationary satellites orbit above the equator at about thirty six thousand kilometres, matching the rotation of the Earth.',
    'Orbital inclination measures the tilt of the orbital plane relative to the equator, and changing it costs a lot of delta-v.',
    'Escape velocity is the speed that a rocket needs to leave the gravitational influence of a planet or a moon entirely.',
]
TWO_TOPICS = ' '.join(PASTA) + '\n\n' + ' '.join(ORBIT)
TOPIC_CHANGE = TWO_TOPICS.index(ORBIT[0])


def word_tokens(text):
    """A token index with one token per word: sizes without a tokenizer."""
    return TokenIndex([m.span() for m in re.finditer(r'\S+', text)])


def unit_rows(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def check_contract(text, spans):
    assert spans == sorted(spans)
    for (s, e), (next_s, _) in zip(spans, spans[1:]):
        assert e <= next_s
    for s, e in spans:
        chunk = text[s:e]
        assert chunk and chunk == chunk.strip()


def brute_force_best(scores, first_allowed):
    n = len(first_allowed)
    best = -np.inf
    for cuts in itertools.product([False, True], repeat=n - 1):
        runs, start = [], 0
        for i, cut in enumerate(cuts):
            if cut:
                runs.append((start, i))
                start = i + 1
        runs.append((start, n - 1))
        if all(j >= first_allowed[i] for j, i in runs):
            best = max(best, reward(scores, runs))
    return best


def reward(scores, runs):
    return sum(np.triu(scores[j : i + 1, j : i + 1], k=1).sum() for j, i in runs)


# The pure DP, on hand-made matrices.


def test_optimal_segmentation_finds_blocks():
    blocks = [0, 0, 0, 1, 1, 2]
    scores = np.array([[1.0 if a == b else -1.0 for b in blocks] for a in blocks])
    assert optimal_segmentation(scores, [0] * 6) == [(0, 2), (3, 4), (5, 5)]


def test_optimal_segmentation_respects_run_limits():
    scores = np.ones((5, 5))
    # Runs of at most two items: ties prefer the longest run ending at each item.
    first_allowed = [0, 0, 1, 2, 3]
    assert optimal_segmentation(scores, first_allowed) == [(0, 0), (1, 2), (3, 4)]


def test_optimal_segmentation_matches_brute_force():
    rng = np.random.default_rng(0)
    for n in range(1, 9):
        raw = rng.normal(size=(n, n))
        scores = centre_similarity(raw + raw.T)
        limit = rng.integers(1, n + 1)
        first_allowed = [max(0, i - limit + 1) for i in range(n)]
        runs = optimal_segmentation(scores, first_allowed)
        assert [j for j, _ in runs][0] == 0 and runs[-1][1] == n - 1
        assert all(b[0] == a[1] + 1 for a, b in zip(runs, runs[1:]))
        assert all(j >= first_allowed[i] for j, i in runs)
        assert reward(scores, runs) == pytest.approx(brute_force_best(scores, first_allowed))


def test_centre_similarity_zeroes_mean_and_diagonal():
    centred = centre_similarity(np.array([[1.0, 0.5, 0.1], [0.5, 1.0, 0.3], [0.1, 0.3, 1.0]]))
    assert np.allclose(np.diag(centred), 0)
    assert centred.sum() == pytest.approx(0)
    assert centred[0, 1] == pytest.approx(0.5 - 0.3)


def test_cluster_band_equals_dense_matrix():
    text = ' '.join(f'w{i}.' for i in range(120))
    tokens = word_tokens(text)
    pieces = piece_spans(text, tokens, 7)
    vectors = unit_rows(np.random.default_rng(1).normal(size=(len(pieces), 8)))
    spans = cluster_semantic_spans(text, tokens, pieces, vectors, max_size=30)
    first = first_allowed_starts(tokens, pieces, 30)
    dense = optimal_segmentation(centre_similarity(vectors @ vectors.T), first)
    assert spans == [(pieces[j][0], pieces[i][1]) for j, i in dense]
    assert all(tokens.count(s, e) <= 30 for s, e in spans)


def test_cluster_memory_does_not_grow_with_the_run_limit():
    # 3,000 pieces in one allowed run: a band or dense matrix of scores would take 72 MB.
    import tracemalloc

    n = 3000
    text = ' '.join(f'w{i}.' for i in range(n))
    tokens = word_tokens(text)
    pieces = piece_spans(text, tokens, 1)
    vectors = unit_rows(np.random.default_rng(2).normal(size=(n, 8)))
    tracemalloc.start()
    spans = cluster_semantic_spans(text, tokens, pieces, vectors, max_size=10**9)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 * 10**6, peak  # the embeddings and a run's partial sums, a few hundred KB
    first = first_allowed_starts(tokens, pieces, 10**9)
    small = 200  # the same program on the dense matrix, on a prefix small enough to hold
    dense = optimal_segmentation(centre_similarity(vectors[:small] @ vectors[:small].T), first[:small])
    assert cluster_semantic_spans(text, tokens, pieces[:small], vectors[:small], max_size=10**9) == [
        (pieces[j][0], pieces[i][1]) for j, i in dense]
    assert spans[0][0] == 0 and spans[-1][1] == len(text)


def test_cluster_keeps_single_oversize_piece():
    text = 'alpha beta gamma delta. epsilon zeta.'
    tokens = word_tokens(text)
    pieces = [(0, 23), (24, 37)]
    spans = cluster_semantic_spans(text, tokens, pieces, unit_rows([[1, 0], [1, 0]]), max_size=3)
    assert spans == pieces


def test_cluster_rejects_mismatched_embeddings():
    with pytest.raises(ValueError):
        cluster_semantic_spans('a b', word_tokens('a b'), [(0, 3)], np.zeros((2, 4)))


# The breakpoint threshold and cuts, on hand-made distances.


def test_breakpoint_threshold():
    distances = [0.1, 0.5, 0.3, 0.9, 0.2]
    assert breakpoint_threshold(distances, 2) == 0.3
    assert breakpoint_threshold(distances, 0) == 0.9
    assert breakpoint_threshold(distances, 5) == float('-inf')
    for n_cuts in range(6):
        assert sum(d > breakpoint_threshold(distances, n_cuts) for d in distances) == n_cuts
    # Ties are cut together or not at all: fewer cuts than asked, never more.
    assert sum(d > breakpoint_threshold([0.5, 0.5, 0.1], 1) for d in [0.5, 0.5, 0.1]) == 0
    with pytest.raises(ValueError):
        breakpoint_threshold(distances, -1)


def test_breakpoint_cuts_at_largest_distances():
    text = ' '.join(f'w{i}' for i in range(6))
    tokens = word_tokens(text)
    pieces = [m.span() for m in re.finditer(r'\S+', text)]
    angles = np.cumsum([0, 0.1, 1.0, 0.1, 0.6, 0.1])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    # 6 tokens at 2 per chunk: 3 chunks, so the two largest distances are cut.
    spans = breakpoint_spans(text, tokens, pieces, vectors, chunk_size=2, max_tokens=None)
    assert [text[s:e] for s, e in spans] == ['w0 w1', 'w2 w3', 'w4 w5']


def test_breakpoint_enforces_max_tokens_on_identical_windows():
    text = ' '.join(['same words here.'] * 40)
    tokens = word_tokens(text)
    pieces = piece_spans(text, tokens, 6)
    vectors = unit_rows(np.ones((len(pieces), 4)))
    spans = breakpoint_spans(text, tokens, pieces, vectors, chunk_size=1000, max_tokens=25)
    check_contract(text, spans)
    sizes = [tokens.count(s, e) for s, e in spans]
    assert max(sizes) <= 25
    # Identical windows are halved, not peeled: no fragment of a single piece.
    assert min(sizes) > 6


def test_window_texts_are_exact_clipped_spans():
    text = 'a. b. c. d. e.'
    pieces = [m.span() for m in re.finditer(r'\S+', text)]
    assert window_texts(text, pieces, 1) == ['a. b.', 'a. b. c.', 'b. c. d.', 'c. d. e.', 'd. e.']
    assert window_texts(text, pieces, 0) == ['a.', 'b.', 'c.', 'd.', 'e.']


@pytest.mark.parametrize('chunker', [cluster_semantic_spans, breakpoint_spans])
def test_no_pieces_and_one_piece(chunker):
    text = '  just one piece  '
    tokens = word_tokens(text)
    assert chunker(text, tokens, [], np.zeros((0, 4))) == []
    assert chunker(text, tokens, [(2, 16)], unit_rows([[1, 2, 3, 4]])) == [(2, 16)]


# The real model.


@pytest.fixture(scope='module')
def model():
    return load_embedding_model('all-MiniLM-L6-v2')


def model_tokens(model, text):
    return TokenIndex(token_offsets(model.tokenizer, text))


def test_unknown_chunker_name(model):
    with pytest.raises(ValueError):
        semantic_spans('nope', 'text', model_tokens(model, 'text'), model, 400)


@pytest.mark.parametrize('name', SEMANTIC_CHUNKERS)
def test_short_and_blank_documents(model, name):
    text = '\n  A document shorter than one piece.  \n'
    spans = semantic_spans(name, text, model_tokens(model, text), model, 400)
    start = text.index('A')
    assert spans == [(start, start + len(text.strip()))]
    assert semantic_spans(name, ' \n ', model_tokens(model, ' \n '), model, 400) == []


@pytest.mark.parametrize('name', SEMANTIC_CHUNKERS)
def test_repeated_sentence(model, name):
    text = ' '.join(['The cat sat on the mat.'] * 80)
    tokens = model_tokens(model, text)
    spans = semantic_spans(name, text, tokens, model, 200)
    check_contract(text, spans)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    limit = 200 if name == CLUSTER_SEMANTIC else embeddable_tokens(model)
    assert all(tokens.count(s, e) <= limit for s, e in spans)


def test_two_topics_cluster(model):
    tokens = model_tokens(model, TWO_TOPICS)
    pieces = piece_spans(TWO_TOPICS, tokens)
    assert TOPIC_CHANGE in [s for s, _ in pieces]
    vectors = embed_texts(model, [TWO_TOPICS[s:e] for s, e in pieces])
    # Either topic fits in one chunk, the whole document does not.
    max_size = len(tokens) * 3 // 4
    spans = cluster_semantic_spans(TWO_TOPICS, tokens, pieces, vectors, max_size)
    check_contract(TWO_TOPICS, spans)
    assert [s for s, _ in spans] == [0, TOPIC_CHANGE]


def test_two_topics_breakpoint(model):
    tokens = model_tokens(model, TWO_TOPICS)
    pieces = piece_spans(TWO_TOPICS, tokens)
    starts = [s for s, _ in pieces]
    change = starts.index(TOPIC_CHANGE)
    chunk_size = len(tokens) // 2
    # With one neighbour per side the single cut lands on the topic change.
    narrow = embed_texts(model, window_texts(TWO_TOPICS, pieces, 1))
    spans = breakpoint_spans(TWO_TOPICS, tokens, pieces, narrow, chunk_size, max_tokens=None)
    assert [s for s, _ in spans] == [0, TOPIC_CHANGE]
    # The study's three neighbours blur the change: the cut lands within them.
    spans = semantic_spans(SEMANTIC_BREAKPOINT, TWO_TOPICS, tokens, model, chunk_size)
    check_contract(TWO_TOPICS, spans)
    cuts = [starts.index(s) for s, _ in spans[1:]]
    assert any(abs(cut - change) <= 3 for cut in cuts)
    assert all(tokens.count(s, e) <= embeddable_tokens(model) for s, e in spans)


@pytest.mark.parametrize('name', SEMANTIC_CHUNKERS)
def test_deterministic_and_bounded(model, name):
    text = '\n\n'.join([' '.join(PASTA[:3]), ' '.join(ORBIT[:3]), ' '.join(PASTA[3:5])])
    tokens = model_tokens(model, text)
    first = semantic_spans(name, text, tokens, model, 60, batch_size=3)
    assert semantic_spans(name, text, tokens, model, 60, batch_size=64) == first
    check_contract(text, first)
    assert len(first) > 1
    limit = 60 if name == CLUSTER_SEMANTIC else embeddable_tokens(model)
    pieces = piece_spans(text, tokens)
    for s, e in first:
        assert tokens.count(s, e) <= limit or (s, e) in pieces
