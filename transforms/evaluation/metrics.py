"""Retrieval metrics of the chunk-filtering study: token and character overlap, greedy oracle.

Section 3.6 of the study: for a question, `T_e` is the token set of its
reference passage(s) and `T_r` the token set of the union of the top-k
retrieved chunks; precision `|Te & Tr| / |Tr|`, recall `|Te & Tr| / |Te|`,
IoU `|Te & Tr| / |Te | Tr|`. Two tokenizations: `raw` (lowercased `\\w+`
words) and `preprocessed` (spaCy lemmas, English stopwords removed). The
character-range variant is the one of the Chroma chunking study, so results
compare with its published tables. Every function here is pure; spaCy is
only touched by `load_lemmatizer` and `lemma_tables`.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import AbstractSet, Iterable, Optional, Sequence

import numpy as np

Span = tuple[int, int]

RAW = 'raw'
PREPROCESSED = 'preprocessed'
VARIANTS = (RAW, PREPROCESSED)

_WORD = re.compile(r'\w+')
@dataclasses.dataclass(frozen=True)
class Scores:
    """Precision, recall and IoU of one retrieval, each in [0, 1]."""

    precision: float
    recall: float
    iou: float


def raw_tokens(text: str) -> frozenset[str]:
    """The `raw` token set: lowercased `\\w+` words, duplicates counted once."""
    return frozenset(_WORD.findall(text.lower()))


def token_scores(
    expected: AbstractSet, retrieved: AbstractSet, foreign: AbstractSet = frozenset()
) -> Scores:
    """Token precision, recall and IoU of one question (study Section 3.6).

    Tokens of `foreign` chunks (retrieved, but from another document than the
    question's) count in `T_r` but can never be hits: a word of another corpus
    is not evidence of the reference passage, as in the Chroma study, where
    such chunks count in the denominator only.

    Args:
      expected: `T_e`, the tokens of the reference passage(s).
      retrieved: Tokens of the retrieved chunks of the question's document.
      foreign: Tokens of the retrieved chunks of other documents.

    Returns:
      The scores; a ratio whose denominator is empty is 0 (an empty `T_r`
      has precision 0, an empty `T_e` recall 0), never NaN.
    """
    hits = len(expected & retrieved)
    all_retrieved = retrieved | foreign
    union = len(expected | all_retrieved)
    return Scores(
        precision=_ratio(hits, len(all_retrieved)),
        recall=_ratio(hits, len(expected)),
        iou=_ratio(hits, union),
    )


def union_spans(spans: Iterable[Span]) -> list[Span]:
    """Merges overlapping or touching `[start, end)` spans; empty spans vanish."""
    merged: list[list[int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def spans_length(spans: Iterable[Span]) -> int:
    """Characters covered by the spans, overlaps counted once."""
    return sum(e - s for s, e in union_spans(spans))


def overlap_length(a: Iterable[Span], b: Iterable[Span]) -> int:
    """Characters covered by both span sets."""
    a, b = union_spans(a), union_spans(b)
    total = i = j = 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def char_scores(
    references: Sequence[Span], retrieved: Sequence[Span], foreign_chars: int = 0
) -> Scores:
    """Character-range precision, recall and IoU, as the Chroma chunking study.

    Retrieved ranges are unioned, so text shared by overlapping chunks counts
    once (Chroma sums chunk lengths instead; the two agree for chunkers
    without overlap).

    Args:
      references: Reference ranges in the question's document.
      retrieved: Ranges of the retrieved chunks of that document.
      foreign_chars: Characters of retrieved chunks of other documents.

    Returns:
      precision = overlap / retrieved chars, recall = overlap / reference
      chars, IoU = overlap / chars of the union; 0 for an empty denominator.
    """
    overlap = overlap_length(references, retrieved)
    retrieved_chars = spans_length(retrieved) + foreign_chars
    reference_chars = spans_length(references)
    return Scores(
        precision=_ratio(overlap, retrieved_chars),
        recall=_ratio(overlap, reference_chars),
        iou=_ratio(overlap, retrieved_chars + reference_chars - overlap),
    )


def greedy_cover(incidence: np.ndarray, k: int) -> tuple[list[int], int]:
    """Greedy maximum coverage: up to `k` rows covering the most columns.

    Each step takes the row adding the most uncovered columns (the lowest row
    index on ties, so the result is deterministic) and stops early once no row
    adds any. Greedy is the study's oracle (Figure 3) and within `1 - 1/e` of
    the optimum.

    Args:
      incidence: `(candidates, tokens)` boolean matrix; `[i, t]` says that
        candidate `i` contains token `t`.
      k: Rows to pick at most, >= 0.

    Returns:
      `(rows picked in order, number of columns covered)`.

    Raises:
      ValueError: If `k` is negative or `incidence` is not 2-D.
    """
    if k < 0:
        raise ValueError(f'k must be >= 0, got {k}')
    incidence = np.asarray(incidence, dtype=bool)
    if incidence.ndim != 2:
        raise ValueError(f'incidence must be 2-D, got shape {incidence.shape}')
    covered = np.zeros(incidence.shape[1], dtype=bool)
    chosen: list[int] = []
    if incidence.shape[0] == 0:
        return chosen, 0
    for _ in range(k):
        gains = incidence[:, ~covered].sum(axis=1)
        best = int(np.argmax(gains))
        if gains[best] == 0:
            break
        chosen.append(best)
        covered |= incidence[best]
    return chosen, int(covered.sum())


def greedy_oracle(
    expected: AbstractSet, candidates: Sequence[AbstractSet], k: int,
    incidence: Optional[np.ndarray] = None,
) -> tuple[list[int], float]:
    """The study's oracle: up to `k` candidates greedily maximizing coverage of `T_e`.

    Args:
      expected: `T_e`.
      candidates: Token sets of the chunks the oracle may pick (the question's
        document, in the filtered index).
      k: Chunks to pick at most.
      incidence: The `(candidates, tokens of T_e)` boolean matrix, when the
        caller has it (the evaluation slices one per document from a
        `TokenMatrix`); columns of tokens no candidate holds may be left out,
        they change no gain. `candidates` is then unused.

    Returns:
      `(indices into candidates, |covered & T_e| / |T_e|)`; coverage 0 for an
      empty `T_e`.
    """
    if incidence is None:
        tokens = sorted(expected)
        incidence = np.array([[t in c for t in tokens] for c in candidates], dtype=bool)
        incidence = incidence.reshape(len(candidates), len(tokens))
    chosen, covered = greedy_cover(incidence, k)
    return chosen, _ratio(covered, len(expected))


class TokenMatrix:
    """Chunk token sets of one variant as per-document sparse incidence matrices.

    The oracle needs, for each question and filter, which kept chunks of the
    question's document hold which expected tokens; slicing one matrix per
    document is what makes 17 filters x 472 questions affordable.
    """

    def __init__(self, token_sets: Sequence[frozenset], doc_ids: Sequence[str]):
        from scipy import sparse

        self.vocab: dict[str, int] = {}
        indices: list[int] = []
        indptr = [0]
        for tokens in token_sets:
            indices.extend(sorted(self.vocab.setdefault(t, len(self.vocab)) for t in tokens))
            indptr.append(len(indices))
        matrix = sparse.csr_matrix(
            (np.ones(len(indices), dtype=bool), indices, indptr),
            shape=(len(token_sets), max(1, len(self.vocab))))
        rows: dict[str, list[int]] = collections.defaultdict(list)
        for i, doc_id in enumerate(doc_ids):
            rows[doc_id].append(i)
        self.rows = {d: np.array(r) for d, r in rows.items()}
        self._by_doc = {d: matrix[r].tocsc() for d, r in self.rows.items()}

    def incidence(self, doc_id: str, expected: AbstractSet) -> np.ndarray:
        """`(chunks of doc_id, tokens of expected found in any chunk)` boolean matrix."""
        columns = sorted(self.vocab[t] for t in expected if t in self.vocab)
        if doc_id not in self._by_doc:
            return np.zeros((0, len(columns)), dtype=bool)
        return self._by_doc[doc_id][:, columns].toarray().astype(bool)

    def oracle(self, doc_id: str, expected: AbstractSet, incidence: np.ndarray,
               kept: np.ndarray, k: int) -> float:
        """`greedy_oracle` coverage over the chunks of `doc_id` that `kept` (one bool per row) keeps.

        Args:
          doc_id: The question's document.
          expected: `T_e`.
          incidence: `self.incidence(doc_id, expected)`, computed once per question.
          kept: Per row of the matrix, whether the filter kept the chunk.
          k: Chunks the oracle picks at most.
        """
        if doc_id not in self.rows:
            return 0.0
        return greedy_oracle(expected, (), k, incidence=incidence[kept[self.rows[doc_id]]])[1]


@dataclasses.dataclass(frozen=True)
class VariantTokens:
    """One token variant of a chunker's chunks and of the questions, ready to score.

    Attributes:
      sets: Each chunk's token set, in chunk order.
      doc_of: Each chunk's document.
      expected: Each question's `T_e`.
      matrix: The chunks' `TokenMatrix`.
      incidences: Each question's `matrix.incidence`, over its document's chunks.
    """

    sets: list
    doc_of: list
    expected: list
    matrix: TokenMatrix
    incidences: list

    @classmethod
    def of(cls, variant: str, chunks: Sequence, questions: Sequence, texts: dict,
           lemmas: dict) -> 'VariantTokens':
        """Tokenizes chunks (`.text`, `.doc_id`, char range) and questions (`.doc_id`, `.references`).

        Args:
          variant: `raw` or `preprocessed`.
          chunks: The chunks, in the order retrieval rows refer to.
          questions: The questions.
          texts: Document text by doc_id (`raw` references).
          lemmas: `LemmaTable` by doc_id (`preprocessed`).
        """
        if variant == RAW:
            sets = [raw_tokens(c.text) for c in chunks]
            expected = [frozenset().union(*(raw_tokens(texts[q.doc_id][s:e]) for s, e in q.references))
                        for q in questions]
        else:
            sets = [lemmas[c.doc_id].tokens(c.char_start, c.char_end) for c in chunks]
            expected = [lemmas[q.doc_id].spans_tokens(q.references) for q in questions]
        doc_of = [c.doc_id for c in chunks]
        matrix = TokenMatrix(sets, doc_of)
        incidences = [matrix.incidence(q.doc_id, e) for q, e in zip(questions, expected)]
        return cls(sets, doc_of, expected, matrix, incidences)

    def scores(self, questions: Sequence, retrieved: Sequence[Sequence[int]], kept: np.ndarray,
               k: int) -> tuple[list[Scores], list[float]]:
        """Per question: token `Scores` of its retrieved rows and the oracle over the kept chunks.

        Only retrieved chunks of the question's own document can hit `T_e`;
        the others count as retrieved tokens (see `token_scores`).
        """
        token, oracle = [], []
        for i, (q, hits) in enumerate(zip(questions, retrieved)):
            own = frozenset().union(*(self.sets[r] for r in hits if self.doc_of[r] == q.doc_id))
            foreign = frozenset().union(*(self.sets[r] for r in hits if self.doc_of[r] != q.doc_id))
            token.append(token_scores(self.expected[i], own, foreign))
            oracle.append(self.matrix.oracle(q.doc_id, self.expected[i], self.incidences[i], kept, k))
        return token, oracle


def retrieved_char_scores(
    references: Sequence[Span], doc_id: str, retrieved: Sequence[tuple[str, int, int]]
) -> Scores:
    """`char_scores` of retrieved `(doc_id, char_start, char_end)` chunks for a question of `doc_id`.

    Chunks of other documents count as retrieved text only: their ranges are
    unioned per document, never against the references.
    """
    own = [(s, e) for d, s, e in retrieved if d == doc_id]
    foreign: dict[str, list] = collections.defaultdict(list)
    for d, s, e in retrieved:
        if d != doc_id:
            foreign[d].append((s, e))
    return char_scores(references, own, sum(spans_length(spans) for spans in foreign.values()))


def reduction(total: int, kept: int) -> float:
    """Percentage of chunks removed by a filter (0 for an empty index)."""
    if kept > total or kept < 0:
        raise ValueError(f'kept must be in [0, total={total}], got {kept}')
    return 100.0 * _ratio(total - kept, total)


def mean(values: Sequence[float]) -> float:
    """The average, 0 for no values."""
    return float(np.mean(values)) if len(values) else 0.0


def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator) / denominator if denominator else 0.0

