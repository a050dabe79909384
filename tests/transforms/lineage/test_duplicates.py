"""Deltas and the audit of dropped duplicates, against the kept chunk at the end of each chain (Beam)."""

import dataclasses

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import make, wrapped_release
from transforms.lineage.duplicates import TALLIES, CompareWithKeepers
from transforms.lineage.lossless import merge_tallies
from transforms.lineage.represents import Link
from transforms.types import Document, Dropped

OLD, NEW = wrapped_release('15.0.0'), wrapped_release('15.1.0')
SOCKETS = 'The socket module gives access to the network. Timeouts can be set on each socket.'


def corpus():
    """v1 kept; v2 (15.1.0) a near-copy of v1; v3 a copy of v2; s a semantic near-copy of v1 with other words."""
    texts = {'v1': OLD, 'v2': NEW, 'v3': NEW, 's': SOCKETS}
    documents = [Document(d, t, f'{d}.txt') for d, t in texts.items()]
    chunks = {d: make(d, 0, t) for d, t in texts.items()}
    dropped = [Dropped(chunks['v2'], 'minhash', 'v1#0', 0.9), Dropped(chunks['v3'], 'exact', 'v2#0', 1.0),
               Dropped(chunks['s'], 'similarity', 'v1#0', 0.91)]
    resolved = [('v1#0', Link(d.chunk.chunk_id, d.chunk.doc_id)) for d in dropped]
    return documents, [chunks['v1']], dropped, resolved


def compare(deltas, semantic=False):
    documents, kept, dropped, resolved = corpus()
    p = TestPipeline()
    out = {
        'documents': p | 'Documents' >> beam.Create(documents), 'kept': p | 'Kept' >> beam.Create(kept),
        'dropped': p | 'Dropped' >> beam.Create(dropped), 'resolved': p | 'Resolved' >> beam.Create(resolved),
    } | CompareWithKeepers(deltas, semantic)
    return p, out


def delta_row(chunk):
    return chunk.chunk_id, chunk.delta_of, chunk.text.split('\n')[0], chunk.represents


def totals(tallies):
    t = merge_tallies(tallies)
    return t.chunks_checked, t.sentences_checked, t.sentences_lost, [(x.chunk_id, x.text[:20]) for x in t.examples]


def counts(tallies):
    return totals(tallies)[:3]


def test_a_copy_of_a_near_copy_is_compared_with_the_chunk_kept_for_both():
    p, out = compare(deltas=True)
    # v3's deltas equal v2's, so they are merged and listed: a query restricted to v3 finds them.
    assert_that(out['deltas'] | beam.Map(delta_row), equal_to([
        ('v2#0~delta0', 'v1#0', 'A non-normative HTML file listing all', (('v3#0~delta0', 'v3'),)),
        ('v2#0~delta1', 'v1#0', '>>> import unicodedata', (('v3#0~delta1', 'v3'),)),
    ]), label='Deltas')
    # With deltas on only the semantic drop, which makes none, loses its sentences.
    assert_that(out[TALLIES] | beam.combiners.ToList() | beam.Map(totals), equal_to([
        (3, 20, 2, [('s#0', 'The socket module gi'), ('s#0', 'Timeouts can be set ')])]), label='Audit')
    p.run()


def test_with_deltas_off_the_audit_counts_what_the_drops_lost():
    p, out = compare(deltas=False)
    assert_that(out['deltas'], equal_to([]), label='NoDeltas')
    # The changed sentence and code line of v2 and of v3, and both sentences of s.
    assert_that(out[TALLIES] | beam.combiners.ToList() | beam.Map(counts),
                equal_to([(3, 20, 6)]), label='Audit')
    p.run()


def test_semantic_deltas_carry_the_semantic_drop_too():
    p, out = compare(deltas=True, semantic=True)
    assert_that(out[TALLIES] | beam.combiners.ToList() | beam.Map(counts),
                equal_to([(3, 20, 0)]), label='Audit')
    p.run()


def test_orphans_are_not_checked():
    documents, kept, dropped, resolved = corpus()
    with TestPipeline() as p:
        out = {
            'documents': p | 'Documents' >> beam.Create(documents), 'kept': p | 'Kept' >> beam.Create(kept),
            'dropped': p | 'Dropped' >> beam.Create(dropped + [dataclasses.replace(dropped[0], duplicate_of=None)]),
            'resolved': p | 'Resolved' >> beam.Create(resolved[2:]),
        } | CompareWithKeepers(True)
        assert_that(out[TALLIES] | beam.combiners.ToList() | beam.Map(counts),
                    equal_to([(1, 2, 2)]))
