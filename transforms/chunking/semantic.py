"""Semantic chunkers: chunk boundaries chosen from embeddings of small pieces.

Both chunkers follow the Chroma chunking study (`chunking_evaluation`): the
document is first cut into pieces of about 50 tokens by the recursive splitter,
pieces are embedded, and chunks are runs of consecutive pieces. As with the
token chunkers, a chunk is the exact span from its first piece's start to its
last piece's end, so `text[start:end]` is the chunk and nothing is re-joined.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from transforms.chunking.chunkers import (
    CLUSTER_SEMANTIC,
    SEMANTIC_CHUNKERS,
    Span,
    TokenIndex,
    bound_spans,
    max_chunk_chars,
    split_recursive,
    strip_span,
)

PIECE_SIZE = 50
WINDOW_BUFFER = 3


def piece_spans(text: str, tokens: TokenIndex, piece_size: int = PIECE_SIZE) -> list[Span]:
    """Cuts a document into the small pieces semantic chunkers group.

    Args:
      text: The document text.
      tokens: Its token index.
      piece_size: Maximum tokens per piece, > 0 (50 in the study).

    Returns:
      The piece spans, in document order; empty for a blank document.

    Raises:
      ValueError: if `piece_size` is not positive.
    """
    return split_recursive(text, tokens, piece_size, 0)


def first_allowed_starts(tokens: TokenIndex, pieces: Sequence[Span], max_size: int) -> list[int]:
    """For each piece `i`, the first piece a group ending at `i` may start with.

    A group may span at most `max_size` tokens, but a single piece is always
    allowed so that every document has a segmentation.

    Args:
      tokens: The document's token index.
      pieces: The piece spans, in document order.
      max_size: Maximum tokens per group.

    Returns:
      `first[i] <= i`, non-decreasing in `i`.
    """
    first = []
    j = 0
    for i, (_, end) in enumerate(pieces):
        # The count only shrinks as the start moves right, so the two pointers
        # never move back: O(n log n) for all pieces.
        while j < i and tokens.count(pieces[j][0], end) > max_size:
            j += 1
        first.append(j)
    return first


def centre_similarity(similarity: np.ndarray) -> np.ndarray:
    """Centres a similarity matrix as ClusterSemanticChunker does.

    The mean of the off-diagonal entries is subtracted, so grouping two pieces
    pays off only when they are more alike than two pieces of the document
    taken at random. The diagonal is zeroed: every piece contributes its own
    entry whatever the segmentation, so it cannot change the optimum.

    Args:
      similarity: A symmetric `(n, n)` matrix.

    Returns:
      A new float64 matrix.
    """
    matrix = np.array(similarity, dtype=np.float64)
    n = matrix.shape[0]
    if n > 1:
        matrix -= (matrix.sum() - np.trace(matrix)) / (n * (n - 1))
    np.fill_diagonal(matrix, 0.0)
    return matrix


def optimal_segmentation(scores: np.ndarray, first_allowed: Sequence[int]) -> list[tuple[int, int]]:
    """Splits `n` items into runs maximizing the sum of within-run pair scores.

    The reward of a run `[j..i]` is the sum of `scores[a, b]` over its pairs
    `a < b` (half of `scores[j:i+1, j:i+1].sum()` with a zero diagonal, the
    reward of Chroma's implementation, which has the same optimum).

    Args:
      scores: A symmetric `(n, n)` matrix, e.g. from `centre_similarity`.
      first_allowed: For each `i`, the smallest `j` such that `[j..i]` may be
        a run (see `first_allowed_starts`); `first_allowed[i] <= i`.

    Returns:
      Inclusive `(first, last)` index pairs covering `0..n-1` in order.

    Raises:
      ValueError: if the shapes disagree.
    """
    scores = np.asarray(scores, dtype=np.float64)
    n = len(first_allowed)
    if scores.shape != (n, n):
        raise ValueError(f'scores must be ({n}, {n}), got {scores.shape}')
    return _segment(lambda lo, i: scores[lo:i, i], first_allowed)


def cluster_semantic_spans(
    text: str,
    tokens: TokenIndex,
    pieces: Sequence[Span],
    piece_embeddings: np.ndarray,
    max_size: int = 400,
) -> list[Span]:
    """Chroma's ClusterSemanticChunker: globally optimal groups of similar pieces.

    Pieces are grouped into consecutive runs maximizing the total centred
    similarity within runs (`centre_similarity`, `optimal_segmentation`); a
    run spans at most `max_size` tokens unless it is a single piece.

    Only similarities between pieces that can share a run are computed, one
    piece's at a time: for n pieces and runs of at most k pieces the time is
    O(n * k) dot products and the memory O(k) beyond the embeddings, however
    large `max_size` is (the study's dense n x n matrix, or a band of n x k,
    took gigabytes at `--chunk_size 10**9`).

    Args:
      text: The document text.
      tokens: Its token index.
      pieces: The piece spans, e.g. from `piece_spans`.
      piece_embeddings: One L2-normalized row per piece.
      max_size: Maximum tokens per chunk, > 0.

    Returns:
      The chunk spans, in document order.

    Raises:
      ValueError: if `max_size` is not positive or the embeddings do not
        match the pieces.
    """
    if max_size <= 0:
        raise ValueError(f'max_size must be > 0, got {max_size}')
    vectors = _check_embeddings(pieces, piece_embeddings)
    n = len(pieces)
    if n == 0:
        return []
    first = first_allowed_starts(tokens, pieces, max_size)
    # Mean of the off-diagonal dot products without the n x n matrix:
    # sum_{a != b} e_a.e_b = |sum_a e_a|^2 - sum_a |e_a|^2.
    mean = 0.0
    if n > 1:
        total = vectors.sum(axis=0)
        off_diagonal = float(total @ total) - float(np.einsum('ij,ij->', vectors, vectors))
        mean = off_diagonal / (n * (n - 1))
    def column(lo: int, i: int) -> np.ndarray:
        # Row by row, as einsum sums each dot product: the same bits on every CPU (BLAS's would not be).
        return np.einsum('ij,ij->i', vectors[lo:i], np.broadcast_to(vectors[i], (i - lo, vectors.shape[1]))) - mean

    runs = _segment(column, first)
    return _run_spans(text, pieces, runs)


def window_texts(text: str, pieces: Sequence[Span], buffer: int = WINDOW_BUFFER) -> list[str]:
    """Each piece with up to `buffer` neighbours on each side, as exact text.

    Args:
      text: The document text.
      pieces: The piece spans, in document order.
      buffer: Neighbours on each side, >= 0 (3 in the study).

    Returns:
      One text per piece: from the start of piece `i - buffer` to the end of
      piece `i + buffer`, clipped to the document's pieces.

    Raises:
      ValueError: if `buffer` is negative.
    """
    if buffer < 0:
        raise ValueError(f'buffer must be >= 0, got {buffer}')
    last = len(pieces) - 1
    return [
        text[pieces[max(0, i - buffer)][0] : pieces[min(last, i + buffer)][1]]
        for i in range(len(pieces))
    ]


def breakpoint_threshold(distances: Sequence[float], n_cuts: int) -> float:
    """The smallest threshold with at most `n_cuts` distances strictly above it.

    This is the value Chroma's bisection on [0, 1] converges to, found exactly:
    the distances are sorted and the threshold is the `(n_cuts + 1)`-th
    largest. Tied distances are cut together or not at all, so ties can give
    fewer cuts than asked, never more.

    Args:
      distances: Cosine distances between consecutive windows.
      n_cuts: Cuts wanted, >= 0.

    Returns:
      The threshold; `-inf` when every distance should be cut.

    Raises:
      ValueError: if `n_cuts` is negative.
    """
    if n_cuts < 0:
        raise ValueError(f'n_cuts must be >= 0, got {n_cuts}')
    if n_cuts >= len(distances):
        return float('-inf')
    ordered = np.sort(np.asarray(distances, dtype=np.float64))
    return float(ordered[len(ordered) - 1 - n_cuts])


def breakpoint_spans(
    text: str,
    tokens: TokenIndex,
    pieces: Sequence[Span],
    window_embeddings: np.ndarray,
    chunk_size: int = 400,
    max_tokens: Optional[int] = 256,
) -> list[Span]:
    """Chroma's KamradtModifiedChunker: cuts where consecutive windows differ most.

    The cosine distance between the windows of consecutive pieces (see
    `window_texts`) is computed; the document is cut at the largest distances,
    as many as give chunks of `chunk_size` tokens on average. A run still over
    `max_tokens` is then cut again at its own largest distances until it fits,
    so chunks are never truncated by the embedding model.

    Args:
      text: The document text.
      tokens: Its token index.
      pieces: The piece spans, e.g. from `piece_spans`.
      window_embeddings: One L2-normalized row per piece's window.
      chunk_size: Target average tokens per chunk, > 0.
      max_tokens: Maximum tokens per chunk, > 0, or None for no limit. A
        single piece over it is kept whole: pieces are never split.

    Returns:
      The chunk spans, in document order.

    Raises:
      ValueError: if a size is not positive or the embeddings do not match
        the pieces.
    """
    if chunk_size <= 0:
        raise ValueError(f'chunk_size must be > 0, got {chunk_size}')
    if max_tokens is not None and max_tokens <= 0:
        raise ValueError(f'max_tokens must be > 0 or None, got {max_tokens}')
    vectors = _check_embeddings(pieces, window_embeddings)
    n = len(pieces)
    if n == 0:
        return []
    distances = 1.0 - np.einsum('ij,ij->i', vectors[:-1], vectors[1:])
    total = tokens.count(pieces[0][0], pieces[-1][1])
    n_chunks = max(1, round(total / chunk_size))
    threshold = breakpoint_threshold(distances, min(n_chunks - 1, n - 1))
    runs = []
    start = 0
    for i in np.flatnonzero(distances > threshold).tolist():
        runs.append((start, i))
        start = i + 1
    runs.append((start, n - 1))
    if max_tokens is not None:
        runs = [part for run in runs for part in _fit(tokens, pieces, distances, run, max_tokens)]
    return _run_spans(text, pieces, runs)


def semantic_spans(
    name: str,
    text: str,
    tokens: TokenIndex,
    model,
    chunk_size: int,
    batch_size: int = 64,
    embed: Optional[Callable[[list[str]], np.ndarray]] = None,
    piece_size: int = PIECE_SIZE,
    window: int = WINDOW_BUFFER,
) -> list[Span]:
    """Chunks one document with a semantic chunker and a loaded model.

    Pieces (or their windows) are embedded once per document, in batches.

    Args:
      name: `cluster_semantic` or `semantic_breakpoint`.
      text: The document text.
      tokens: Its token index, from the model's tokenizer.
      model: A loaded sentence-transformers model.
      chunk_size: Maximum (cluster) or target average (breakpoint) tokens per
        chunk; breakpoint chunks are also capped at what the model embeds
        (`embeddable_tokens`), so none is truncated.
      batch_size: Texts per forward pass.
      embed: Embeds a list of texts as `embed_texts` does, e.g. through a
        cache; by default `embed_texts(model, texts, batch_size)`.
      piece_size: Tokens per piece (see `piece_spans`).
      window: Neighbours on each side of a piece in a breakpoint window
        (see `window_texts`).

    Returns:
      The chunk spans, in document order.

    Raises:
      ValueError: for an unknown chunker name or invalid sizes.
    """
    # Imported here so the pure chunkers above do not pull in Beam.
    from transforms.features.embedding import embed_texts

    if name not in SEMANTIC_CHUNKERS:
        raise ValueError(f'unknown semantic chunker {name!r}; choose one of {list(SEMANTIC_CHUNKERS)}')
    if chunk_size <= 0:
        raise ValueError(f'chunk_size must be > 0, got {chunk_size}')
    embed = embed or (lambda texts: embed_texts(model, texts, batch_size))
    pieces = piece_spans(text, tokens, piece_size)
    if not pieces:
        return []
    if name == CLUSTER_SEMANTIC:
        vectors = embed([text[s:e] for s, e in pieces])
        spans = cluster_semantic_spans(text, tokens, pieces, vectors, max_size=chunk_size)
    else:
        vectors = embed(window_texts(text, pieces, window))
        spans = breakpoint_spans(
            text, tokens, pieces, vectors, chunk_size=chunk_size, max_tokens=embeddable_tokens(model)
        )
    return bound_spans(text, spans, max_chunk_chars(chunk_size))


def embeddable_tokens(model) -> int:
    """Tokens of a text that the model sees: max_seq_length less [CLS] and [SEP]."""
    return model.max_seq_length - model.tokenizer.num_special_tokens_to_add()


def _check_embeddings(pieces: Sequence[Span], embeddings: np.ndarray) -> np.ndarray:
    vectors = np.asarray(embeddings, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(pieces):
        raise ValueError(
            f'need one embedding row per piece ({len(pieces)}), got shape {vectors.shape}'
        )
    return vectors


def _segment(column: Callable[[int, int], np.ndarray], first_allowed: Sequence[int]) -> list[tuple[int, int]]:
    """The DP of `optimal_segmentation`, one item at a time.

    `column(lo, i)` gives the scores of the pairs `(a, i)` for `lo <= a < i`.
    Only the last `i - first_allowed[i]` items' partial sums are held, so the
    memory is that of one run, never of the document times a run.
    """
    n = len(first_allowed)
    best = np.full(n + 1, -np.inf)
    best[0] = 0.0
    start = [0] * n
    # held[a - lo]: the scores of item `a` with the items after it up to `i`, summed (lo <= a <= i).
    held = np.zeros(0)
    lo = 0
    for i in range(n):
        first = first_allowed[i]
        held = np.append(held[first - lo:] + column(first, i), 0.0)
        lo = first
        # reward(j..i) = sum of held[j..i]: the run grown leftwards from i.
        rewards = np.cumsum(held[::-1])[::-1]
        values = best[first:i + 1] + rewards
        # The longest run among ties (argmax takes the first): ties merge, so
        # identical pieces give fewer, larger chunks, and the result is deterministic.
        k = int(np.argmax(values))
        best[i + 1] = values[k]
        start[i] = first + k
    runs = []
    i = n - 1
    while i >= 0:
        runs.append((start[i], i))
        i = start[i] - 1
    runs.reverse()
    return runs


def _fit(tokens, pieces, distances, run, max_tokens) -> list[tuple[int, int]]:
    """Cuts a run at its largest inner distances until every part fits."""
    parts = []
    pending = [run]
    while pending:
        first, last = pending.pop()
        if first == last or tokens.count(pieces[first][0], pieces[last][1]) <= max_tokens:
            parts.append((first, last))
            continue
        inner = distances[first:last]
        # Among tied maxima the cut nearest the middle keeps parts balanced:
        # a run of identical pieces is halved, not peeled one piece at a time.
        tied = np.flatnonzero(inner == inner.max())
        cut = first + int(tied[np.argmin(np.abs(2 * tied - (last - first - 1)))])
        # The left part is pushed last so that it is emitted first.
        pending.append((cut + 1, last))
        pending.append((first, cut))
    return parts


def _run_spans(text: str, pieces: Sequence[Span], runs) -> list[Span]:
    spans = []
    for first, last in runs:
        span = strip_span(text, pieces[first][0], pieces[last][1])
        if span[1] > span[0]:
            spans.append(span)
    return spans
