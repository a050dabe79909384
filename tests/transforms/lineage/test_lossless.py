"""The lossless audit: sentences neither covered by the kept chunk nor carried by a delta, counted and combined."""

import json

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline

from tests.helpers import make, wrapped_release
from transforms.lineage.deltas import Duplicate, delta_chunks
from transforms.lineage.lossless import (
    AUDIT_FILE,
    EXAMPLES,
    Loss,
    Tally,
    WriteLosslessAudit,
    merge_tallies,
    not_in_deltas,
    read_report,
    report,
    uncovered_sentences,
)
from transforms.lineage.sentences import KeptText
from transforms.types import Dropped

OLD = KeptText.of(wrapped_release('15.0.0'))


def duplicate(doc_id, text, reason='minhash'):
    return Duplicate(Dropped(make(doc_id, 0, text), reason, 'v1#0', 0.9), 'v1#0')


def test_what_the_kept_chunk_does_not_cover_is_lost_unless_a_delta_carries_it():
    newer = duplicate('v2', wrapped_release('15.1.0', bullet=True))
    checked, lost = uncovered_sentences(newer, OLD, [])
    # Every sentence with a word counts; the changed sentence, the new bullet and the changed code line are lost.
    assert checked == 10
    assert [x.text.split('\n')[0] for x in lost] == [
        'A non-normative HTML file listing all', '- Bidirectional text is reordered by the paragraph level algorithm.',
        "'15.1.0'"]
    assert {(x.chunk_id, x.keeper, x.reason) for x in lost} == {('v2#0', 'v1#0', 'minhash')}
    # Its own deltas carry all of them: nothing is lost by construction.
    assert uncovered_sentences(newer, OLD, delta_chunks(newer, OLD)) == (10, [])
    assert uncovered_sentences(duplicate('v3', '``` | --- |'), OLD, []) == (0, [])


def test_a_sentence_held_by_another_delta_of_the_kept_chunk_is_carried():
    newer, copy = duplicate('v2', wrapped_release('15.1.0')), duplicate('v3', wrapped_release('15.1.0'), 'similarity')
    _, lost = uncovered_sentences(copy, OLD, [])
    assert len(lost) == 2 and not_in_deltas(lost, delta_chunks(newer, OLD)) == []
    assert not_in_deltas(lost, []) == lost


def test_tallies_combine_in_any_order_to_the_same_result():
    losses = [Loss(f'doc{i % 4}', i, f'doc{i % 4}#0', 'k#0', 'minhash', f'sentence {i}') for i in range(12)]
    tallies = [Tally(1, 3, 2, tuple(sorted(losses[i:i + 2]))) for i in range(0, 12, 2)]
    one = merge_tallies(tallies)
    assert one == merge_tallies(reversed(tallies)) == merge_tallies([merge_tallies(tallies[:3]), *tallies[3:]])
    assert (one.chunks_checked, one.sentences_checked, one.sentences_lost) == (6, 18, 12)
    assert list(one.examples) == sorted(losses)[:EXAMPLES] and one.examples[0].doc_id == 'doc0'
    assert report(one)['examples'][0] == {
        'chunk_id': 'doc0#0', 'doc_id': 'doc0', 'keeper': 'k#0', 'reason': 'minhash', 'text': 'sentence 0'}


def test_the_audit_is_written_once_even_for_no_tallies(tmp_path):
    for name, tallies in (('some', [Tally(1, 4, 1, (Loss('d', 0, 'd#0', 'k#0', 'exact', 'x'),)), Tally(2, 5)]),
                          ('none', [])):
        directory = tmp_path / name
        directory.mkdir()
        with TestPipeline() as p:
            _ = p | beam.Create(tallies) | WriteLosslessAudit(str(directory))
        written = read_report(str(directory))
        assert written == json.loads((directory / AUDIT_FILE).read_text())
        expected = merge_tallies(tallies)
        assert written == report(expected) and written['sentences_checked'] == sum(t.sentences_checked for t in tallies)


def test_a_copy_of_the_kept_text_is_covered_whole():
    # Its own document may cut it into other sentences (here: one span of three characters, a fake
    # context): the same normalized text loses nothing whatever the spans say.
    rewrapped = wrapped_release('15.0.0').replace('for\nevery character', 'for every\ncharacter')
    copy = Duplicate(Dropped(make('v3', 0, rewrapped), 'exact', 'v1#0', 1.0), 'v1#0', sentences=((0, 3),))
    assert uncovered_sentences(copy, KeptText.of(wrapped_release('15.0.0'), spans=[(0, 3)]), []) == (1, [])
    # Another kept text does not cover it.
    assert uncovered_sentences(copy, KeptText((('x',),)), []) == (1, [Loss('v3', 0, 'v3#0', 'v1#0', 'exact', 'The')])
