"""Lineage: chains of duplicate_of resolved to the final keeper, in memory and with keyed joins."""

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import make
from transforms.lineage.represents import AttachRepresents, Link, ResolveLineage, report, resolve, with_represents
from transforms.types import Dropped

# x -minhash-> k -intra_doc-> y (kept); z -exact-> y; k2 -minhash-> low, low dropped without keeper.
RECORDS = [
    ('x#0', 'x', 'k#0'),
    ('k#0', 'k', 'y#0'),
    ('z#0', 'z', 'y#0'),
    ('k2#0', 'k2', 'low#0'),
    ('low#0', 'low', None),
    ('r#0', 'r', None),
]


def dropped_records():
    return [Dropped(make(doc, 0), 'minhash' if dup else 'random', dup) for _, doc, dup in RECORDS]


def test_chains_end_at_the_final_keeper():
    represents, orphans = resolve(RECORDS)
    assert represents == {'y#0': [Link('k#0', 'k'), Link('x#0', 'x'), Link('z#0', 'z')]}
    assert orphans == [Link('k2#0', 'k2')]


def test_report_checks_each_dropped_chunk_is_represented_once():
    dropped = [{'chunk_id': c, 'doc_id': d, 'duplicate_of': t} for c, d, t in RECORDS]
    good = {'k#0': 1, 'x#0': 1, 'z#0': 1}  # y#0 lists all three
    assert report(good, dropped) == {
        'dropped_with_duplicate_of': 4, 'represented_once': 3, 'represented_more_than_once': 0,
        'orphans': 1, 'unrepresented': [], 'ok': True}
    assert not report({**good, 'x#0': 2}, dropped)['ok']  # w#0 lists x#0 too
    assert report({}, dropped)['unrepresented'] == ['k#0', 'x#0', 'z#0']


def link_pair(element):
    keeper, link = element
    return keeper, link.chunk_id


def represents_of(chunk):
    return chunk.chunk_id, chunk.represents


def test_resolve_lineage_with_keyed_joins_matches_the_reference():
    with TestPipeline() as p:
        out = p | beam.Create(dropped_records()) | ResolveLineage(hops=3)
        assert_that(out['resolved'] | beam.Map(link_pair),
                    equal_to([('y#0', 'k#0'), ('y#0', 'x#0'), ('y#0', 'z#0')]), label='Resolved')
        assert_that(out['orphans'], equal_to([Link('k2#0', 'k2')]), label='Orphans')


def test_attach_represents_sets_sorted_links_on_kept_chunks():
    kept = [make('y', 0), make('solo', 0)]
    resolved = [('y#0', Link('z#0', 'z')), ('y#0', Link('k#0', 'k'))]
    with TestPipeline() as p:
        inputs = {'kept': p | 'Kept' >> beam.Create(kept), 'resolved': p | 'Links' >> beam.Create(resolved)}
        out = inputs | AttachRepresents()
        assert_that(out | beam.Map(represents_of),
                    equal_to([('y#0', (('k#0', 'k'), ('z#0', 'z'))), ('solo#0', ())]))
    assert with_represents(make('y', 0), [Link('b', 'B'), Link('a', 'A')]).represents == (('a', 'A'), ('b', 'B'))
