"""Delta chunks: sentence splitting, the coverage rule, exact offsets, merging equal deltas."""

import dataclasses

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import make
from transforms.lineage.deltas import (
    MIN_DELTA_WORDS,
    ExtractDeltas,
    delta_chunks,
    is_covered,
    merge_equal_deltas,
    novel_spans,
    sentence_spans,
    source_of,
    tokens,
)
from transforms.types import DELTA, Dropped

LONG = ('This release of the text library supports Unicode 15.0.0 together with every emoji '
        'sequence, every script extension and every property alias that the standard defines.')
KEEPER = (
    'Release notes for the text library. ' + LONG + '\n'
    '- Collation tables come from the common locale data repository.\n'
    '- Line breaking follows the default algorithm.'
)
NEWER = KEEPER.replace('15.0.0', '15.1.0') + '\n- Bidirectional text is reordered by the paragraph algorithm.'


def sentences(text):
    return [text[s:e] for s, e in sentence_spans(text)]


def test_sentences_end_at_punctuation_and_line_breaks():
    assert sentences('One two. Three "four!" Five\n- six seven\n\n  ') == [
        'One two.', 'Three "four!"', 'Five', '- six seven']
    # A version number is no sentence end.
    assert sentences('Unicode 15.1.0 is supported. Done') == ['Unicode 15.1.0 is supported.', 'Done']
    assert sentences('   ') == []


def test_tokens_keep_version_numbers_whole():
    assert tokens('Supports Unicode 15.1.0, UTF-8.') == ['supports', 'unicode', '15.1.0', 'utf-8']


def test_a_changed_number_is_news_even_in_a_long_sentence():
    new = tokens(LONG.replace('15.0.0', '15.1.0'))
    old = tokens(LONG)
    assert len(new) > 23  # long enough that 4-gram coverage alone would call it covered
    assert not is_covered(new, [old])
    assert is_covered(old, [old])
    # A small wording change without numbers is covered (>= 80% of the 4-grams).
    assert is_covered(tokens(LONG.replace('every property alias', 'each property alias')), [old])


def test_novel_spans_are_runs_of_adjacent_new_sentences():
    spans = novel_spans(NEWER, KEEPER)
    texts = [NEWER[s:e] for s, e in spans]
    assert texts == [LONG.replace('15.0.0', '15.1.0'), '- Bidirectional text is reordered by the paragraph algorithm.']
    appended = KEEPER + '\nNew one here. Another new sentence follows.'
    assert [appended[s:e] for s, e in novel_spans(appended, KEEPER)] == ['New one here. Another new sentence follows.']


def test_short_or_punctuation_only_deltas_are_not_kept():
    assert novel_spans(KEEPER + '\n- New two', KEEPER) == []
    assert novel_spans(KEEPER + '\n--- !!', KEEPER) == []
    assert MIN_DELTA_WORDS == 3


def test_delta_chunks_point_into_the_dropped_chunks_document():
    document = 'Header line of the newer page.\n\n' + NEWER
    start = document.index(NEWER)
    chunk = dataclasses.replace(make('v2', 3, NEWER), char_start=start, char_end=start + len(NEWER),
                                metadata='{"release": "2"}')
    deltas = delta_chunks(Dropped(chunk, 'minhash', 'v1#3', 0.9), KEEPER)
    assert [d.chunk_id for d in deltas] == ['v2#3~delta0', 'v2#3~delta1']
    for d in deltas:
        assert document[d.char_start:d.char_end] == d.text
        assert (d.kind, d.delta_of, d.doc_id, d.chunk_index, d.metadata) == (DELTA, 'v1#3', 'v2', 3, '{"release": "2"}')
        assert source_of(d.chunk_id) == 'v2#3'


def test_equal_deltas_against_one_keeper_are_merged():
    a = delta_chunks(Dropped(make('v2', 0, NEWER), 'minhash', 'v1#0'), KEEPER)
    b = delta_chunks(Dropped(make('v3', 0, NEWER), 'minhash', 'v1#0'), KEEPER)
    merged = merge_equal_deltas(b + a)
    assert [d.chunk_id for d in merged] == ['v2#0~delta0', 'v2#0~delta1']
    assert merged[0].represents == (('v3#0~delta0', 'v3'),)


def delta_id(chunk):
    return chunk.chunk_id, chunk.text


def test_extract_deltas_joins_the_keeper_text():
    keeper, newer, other = make('v1', 0, KEEPER), make('v2', 0, NEWER), make('v3', 0, NEWER)
    dropped = [Dropped(newer, 'minhash', 'v1#0', 0.9), Dropped(other, 'exact', 'v1#0', 1.0)]
    expected = [(d.chunk_id, d.text) for d in delta_chunks(dropped[0], KEEPER)]
    with TestPipeline() as p:
        chunks = p | 'Chunks' >> beam.Create([keeper, newer, other])
        drops = p | 'Dropped' >> beam.Create(dropped)
        out = {'chunks': chunks, 'dropped': drops} | ExtractDeltas()
        assert_that(out | beam.Map(delta_id), equal_to(expected))


def test_semantic_drops_give_deltas_only_when_asked():
    keeper, newer = make('v1', 0, KEEPER), make('v2', 0, NEWER)
    dropped = [Dropped(newer, 'similarity', 'v1#0', 0.95)]
    expected = [(d.chunk_id, d.text) for d in delta_chunks(dropped[0], KEEPER)]
    for semantic, want in ((False, []), (True, expected)):
        with TestPipeline() as p:
            chunks = p | 'Chunks' >> beam.Create([keeper, newer])
            drops = p | 'Dropped' >> beam.Create(dropped)
            out = {'chunks': chunks, 'dropped': drops} | ExtractDeltas(semantic)
            assert_that(out | beam.Map(delta_id), equal_to(want))
