"""Covered's decision (`filters.covered`): a minimum cover of each document's chunk spans.

Spans are hand-made where the test is about the cover's arithmetic; the
chunks the real chunkers cut, with the real tokenizer, where it is about
what a build drops.
"""

import dataclasses
import itertools
import random

import numpy as np
import pytest

from tests.helpers import ORBITS, PASTA, expect, run_filter
from transforms.chunking.chunk_documents import chunks_of_spans
from transforms.chunking.chunkers import ChunkerConfig, TokenIndex, chunk_spans, token_offsets
from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.filters.covered import COVERED_SPLIT, COVERED_WHOLE, covered, minimum_cover, pooled_vectors
from transforms.dedup.in_memory import apply_filter
from transforms.dedup.stages import filter_transform
from transforms.lineage.deltas import sentence_spans
from transforms.types import Document

TEXT = ' '.join(f'word{i:03d}' for i in range(60))  # word i at [8i, 8i + 7)


def chunks_at(spans, text=TEXT, doc_id='doc', metadata=None):
    """Chunks of one document at the given `(start, end)` spans, in that order."""
    return chunks_of_spans(Document(doc_id, text, doc_id, metadata=metadata), [(s, e, 1) for s, e in spans])


def decisions(dropped):
    return {d.chunk.chunk_id: (d.reason, d.duplicate_of, round(d.score, 6)) for d in dropped}


def content(text, spans):
    """The non-whitespace character offsets the spans hold."""
    return {p for s, e in spans for p in range(s, e) if not text[p].isspace()}


def test_windows_overlapping_by_half_keep_every_other_one():
    # Windows of 4 words every 2 words, as fixed 4/2: window j and j + 2 meet at a space.
    spans = [(16 * j, 16 * j + 31) for j in range(29)]
    chunks = chunks_at(spans)
    kept, dropped = covered(chunks)
    assert [c.chunk_index for c in kept] == list(range(0, 29, 2))
    assert all(d.reason == COVERED_SPLIT for d in dropped) and len(dropped) == 14
    # doc#1 [16, 47) shares 15 characters with doc#0 and 15 with doc#2: the earlier wins.
    assert decisions(dropped)['doc#1'] == (COVERED_SPLIT, 'doc#0', round(15 / 31, 6))
    assert content(TEXT, [(c.char_start, c.char_end) for c in kept]) == content(TEXT, spans)


def test_a_chunk_inside_another_is_covered_whole():
    chunks = chunks_at([(0, 80), (18, 44), (72, 120)])
    kept, dropped = covered(chunks)
    assert [c.chunk_id for c in kept] == ['doc#0', 'doc#2']
    assert decisions(dropped) == {'doc#1': (COVERED_WHOLE, 'doc#0', 1.0)}


def test_the_holder_is_the_kept_chunk_sharing_most():
    chunks = chunks_at([(0, 47), (16, 71), (32, 120)])
    kept, dropped = covered(chunks)
    assert [c.chunk_id for c in kept] == ['doc#0', 'doc#2']
    assert decisions(dropped) == {'doc#1': (COVERED_SPLIT, 'doc#2', round(39 / 55, 6))}


def test_chunks_that_meet_at_whitespace_or_not_at_all_are_all_kept():
    # Windows that meet at a space (the chunkers strip it) and one after a gap no chunk holds.
    spans = [(0, 39), (40, 79), (80, 119), (160, 199)]
    kept, dropped = covered(chunks_at(spans))
    assert len(kept) == 4 and dropped == []


def test_identical_spans_keep_by_the_keep_rule():
    a, b = chunks_at([(0, 44), (0, 44)])
    kept, dropped = covered([a, dataclasses.replace(b, salience=0.7)])
    assert [c.chunk_id for c in kept] == ['doc#1']
    assert decisions(dropped) == {'doc#0': (COVERED_WHOLE, 'doc#1', 1.0)}
    kept, _ = covered([b, a])
    assert [c.chunk_id for c in kept] == ['doc#0']  # equal salience: the earlier chunk


def test_the_cover_is_minimum_and_independent_of_input_order():
    rng = random.Random(5)
    words = [(s, s + 7) for s in range(0, len(TEXT), 8)]
    for _ in range(150):
        spans = sorted({(rng.choice(words)[0], rng.choice(words)[1]) for _ in range(rng.randint(1, 7))})
        spans = [(s, e) for s, e in spans if e > s]
        chunks = chunks_at(spans)
        need = content(TEXT, spans)
        chosen = minimum_cover(chunks)
        assert content(TEXT, [spans[i] for i in chosen]) == need
        smallest = next(n for n in range(len(spans) + 1) if any(
            content(TEXT, [spans[i] for i in subset]) == need
            for subset in itertools.combinations(range(len(spans)), n)))
        assert len(chosen) == smallest, spans
        shuffled = list(chunks)
        rng.shuffle(shuffled)
        kept, dropped = covered(shuffled)
        assert sorted(c.chunk_id for c in kept) == sorted(chunks[i].chunk_id for i in chosen)
        assert decisions(dropped) == decisions(covered(chunks)[1])


def test_one_document_at_a_time():
    with pytest.raises(ValueError, match='one document'):
        covered(chunks_at([(0, 44)], doc_id='a') + chunks_at([(0, 44)], doc_id='b'))


@pytest.mark.parametrize('chunker', ['fixed:40:20', 'recursive:40:20', 'fixed:80:40', 'fixed:40:0', 'recursive:40:0'])
def test_real_chunks_lose_no_sentence(chunker, embedding_model):
    """What the real chunkers cut: every sentence of a dropped chunk lies in the kept spans."""
    name, size, overlap = chunker.split(':')
    text = '\n\n'.join([PASTA + ORBITS] * 3)  # paragraphs longer than a chunk
    document = Document('doc.md', text, 'doc.md')
    tokens = TokenIndex(token_offsets(embedding_model.tokenizer, text))
    chunks = chunks_of_spans(document, [
        (s, e, tokens.count(s, e)) for s, e in chunk_spans(text, tokens, ChunkerConfig(name, int(size), int(overlap)))])
    kept, dropped = apply_filter(chunks, FilterSpec('covered'), FilterConfig())
    if overlap == '0':
        assert dropped == []
        return
    assert len(kept) < len(chunks) and all(d.duplicate_of in {c.chunk_id for c in kept} for d in dropped)
    if name == 'fixed':
        assert len(kept) <= len(chunks) // 2 + 1
    held = content(text, [(c.char_start, c.char_end) for c in kept])
    for d in dropped:
        for s, e in sentence_spans(d.chunk.text):
            assert content(text, [(d.chunk.char_start + s, d.chunk.char_start + e)]) <= held


def test_each_scope_is_covered_alone():
    # The same document id under two tenants: each tenant's chunks are a document of their own.
    a = chunks_at([(0, 44), (18, 62), (36, 80)], metadata='{"tenant": "a"}')
    b = chunks_at([(0, 44)], metadata='{"tenant": "b"}')
    b = [dataclasses.replace(c, chunk_id='doc#b') for c in b]
    kept, dropped = apply_filter(a + b, FilterSpec('covered'), FilterConfig(scope=('tenant',)))
    assert sorted(c.chunk_id for c in kept) == ['doc#0', 'doc#2', 'doc#b']
    assert decisions(dropped) == {'doc#1': (COVERED_SPLIT, 'doc#0', round(26 / 44, 6))}


def test_the_build_stage_decides_as_the_pure_decision():
    # The generic grouped stage, one group per (scope, document); chunks arrive in any order.
    chunks = chunks_at([(16 * j, 16 * j + 31) for j in range(9)], doc_id='a') + chunks_at(
        [(0, 47), (16, 71), (32, 120), (18, 44)], doc_id='b')
    expected = apply_filter(chunks, FilterSpec('covered'), FilterConfig())
    assert len(expected[1]) == 6
    run_filter(chunks[::-1], filter_transform(0, FilterSpec('covered'), FilterConfig()))(*expect(expected))


def test_pooled_vectors_put_the_covered_chunks_into_their_keeper_and_add_no_row():
    vectors = np.eye(4, dtype=np.float32)
    pooled = pooled_vectors(vectors, {0: [1], 2: [3, 1]})
    assert pooled.shape == (4, 4) and np.allclose(np.linalg.norm(pooled, axis=1), 1.0)
    assert np.allclose(pooled[0], [2 ** -0.5, 2 ** -0.5, 0, 0]) and np.allclose(pooled[2], np.array([0, 1, 1, 1]) / 3 ** 0.5)
    assert np.array_equal(pooled[[1, 3]], vectors[[1, 3]]) and np.array_equal(vectors, np.eye(4))
