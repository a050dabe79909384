"""The filter and feature transforms on hand-made chunks, against the pure filter decisions.

The unit under test here is the Beam wiring (grouping, side inputs, tagged
outputs, counters), not the embedding model: embeddings are small hand-made
vectors. MinHash signatures and entities are computed with the real
libraries (datasketch, spaCy).
"""

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.transforms.test_dedup import BOILERPLATE, OTHER, PARAGRAPH, TYPO, make, mixed_corpus, unit, with_minhash
from transforms import dedup
from transforms.features import AssignTopics, ComputeFeatures, ComputeMinhash, with_topics
from transforms.filter_chunks import (
    DROPPED,
    KEPT,
    ApplyFilterFn,
    DropExactDuplicates,
    DropByKey,
    DropIntraDocRedundancy,
    DropRandomly,
    FilterChunks,
    PerChunkFn,
    drop_exact_group,
    intra_doc_group,
    step_label,
)
from transforms.filter_pairs import (DropHalfEntityOverlaps, DropNearDuplicates, DropSimilarPairs, band_entries,
                                     candidate_pairs, resolve_components)
from transforms.filters.exact import drop_exact
from transforms.filters.intra_doc import intra_doc, salience
from transforms.filters.minhash import drop_minhash_groups
from transforms.filters.ner_exact import drop_ner_exact
from transforms.filters.ner_half import drop_ner_half
from transforms.filters.random_control import drop_random
from transforms.filters.similarity import drop_similar
from transforms.minhash import MinHashConfig, estimated_jaccard, signatures
from transforms.topics import topics
from transforms.types import Chunk, Dropped


def chunk_id_of(chunk: Chunk) -> str:
    return chunk.chunk_id


def decision_of(d: Dropped) -> tuple:
    return (d.chunk.chunk_id, d.reason, d.duplicate_of, None if d.score is None else round(d.score, 6))


def decisions(dropped) -> list[tuple]:
    return sorted(decision_of(d) for d in dropped)


def run_filter(chunks, transform):
    """Returns a check that runs `transform` on `chunks` and compares kept ids and decisions."""
    def check(expected_kept, expected_dropped):
        with TestPipeline() as p:
            out = p | 'Create' >> beam.Create(chunks, reshuffle=False) | transform
            assert_that(out[KEPT] | 'KeptIds' >> beam.Map(chunk_id_of),
                        equal_to(expected_kept), label='CheckKept')
            assert_that(out[DROPPED] | 'Decisions' >> beam.Map(decision_of),
                        equal_to(expected_dropped), label='CheckDropped')
    return check


def expect(pure_result):
    kept, dropped = pure_result
    return [c.chunk_id for c in kept], decisions(dropped)


# --- tier 1: pure helpers ---------------------------------------------------------


def test_step_labels_are_camel_case():
    assert step_label(0, 'exact') == 'Filter0Exact'
    assert step_label(3, 'similarity_topics_ner') == 'Filter3SimilarityTopicsNer'


def test_exact_group_does_not_depend_on_arrival_order():
    chunks = [make('b', 0, BOILERPLATE), make('a', 2, BOILERPLATE, salience=0.2), make('a', 1, BOILERPLATE)]
    first = drop_exact_group(chunks)
    assert decisions(first[1]) == decisions(drop_exact_group(chunks[::-1])[1])
    assert [c.chunk_id for c in first[0]] == ['a#2']  # higher salience wins


def test_lsh_buckets_and_components_match_the_pure_filter():
    chunks = mixed_corpus() + with_minhash([make('z', 0, PARAGRAPH), make('z', 1, TYPO), make('z', 2, '   ')])
    b, r = MinHashConfig(threshold=0.7).bands()
    buckets = {}
    for chunk in chunks:
        for key, member in band_entries(chunk, b, r):
            buckets.setdefault(key, []).append(member)
    assert not any(m.chunk_id == 'z#2' for ms in buckets.values() for m in ms)  # empty text
    assert all(m.minhash is None for ms in buckets.values() for m in ms)  # signatures stay out of buckets
    signature = {c.chunk_id: c.minhash for c in chunks}
    pairs = {p for item in buckets.items() for p in candidate_pairs(item)}
    edges = [p for p in pairs if estimated_jaccard(signature[p[0]], signature[p[2]]) >= 0.7]
    got = resolve_components(edges)
    _, dropped = drop_minhash_groups(chunks, 0.7)
    assert got == sorted((d.chunk.chunk_id, d.duplicate_of) for d in dropped)
    with pytest.raises(ValueError, match='no minhash'):
        list(band_entries(make('x', 0), b, r))


def test_intra_doc_group_reports_salience_lifts():
    # Two near-copies far from the document's other chunks: low base salience, boosted.
    vectors = [unit(1, 0, 0), unit(1, 0.05, 0), unit(0, 1, 0.1), unit(0, 1, -0.1), unit(0, 0.9, 0.5), unit(0, 0.9, -0.5)]
    chunks = [make('doc', i, f'text {i}', embedding=v) for i, v in enumerate(vectors)]
    config = dedup.FilterConfig(intra_doc_boost=0.5, intra_doc_boost_mode='linear', warn_salience=0.6)
    kept, dropped, lifted = intra_doc_group(chunks[::-1], dedup.FilterSpec('intra_doc'), config)
    assert [c.chunk_id for c in kept] == [c.chunk_id for c in intra_doc(chunks, 0.9, boost=0.5, mode='linear')[0]]
    base = salience(np.stack(vectors))
    # doc#1 is the more central of the pair, so it is kept and boosted (capped at 1.0).
    assert base[1] > base[0] and base[1] <= 0.6
    assert lifted == [('doc#1', pytest.approx(base[1]), 1.0)]


# --- tier 2: DoFns called directly ------------------------------------------------


def test_random_fn_tags_dropped_chunks():
    fn = PerChunkFn(0, dedup.FilterSpec('random', 0.5), dedup.FilterConfig(random_seed=3))
    fn.setup()
    chunks = [make('d', i) for i in range(40)]
    outputs = [o for c in chunks for o in fn.process(c)]
    dropped = [o.value for o in outputs if getattr(o, 'tag', None) == DROPPED]
    kept = [o for o in outputs if isinstance(o, Chunk)]
    assert len(kept) + len(dropped) == 40 and 0 < len(dropped) < 40
    assert decisions(dropped) == decisions(drop_random(chunks, 0.5, 3)[1])


def test_apply_filter_fn_splits_a_group():
    fn = ApplyFilterFn(0, 'exact', drop_exact_group)
    fn.setup()
    outputs = list(fn.process([make('a', 0, BOILERPLATE), make('b', 0, BOILERPLATE), make('c', 0, OTHER)]))
    assert [o.chunk_id for o in outputs if isinstance(o, Chunk)] == ['a#0', 'c#0']
    assert [(o.tag, o.value.duplicate_of) for o in outputs if not isinstance(o, Chunk)] == [(DROPPED, 'a#0')]


# --- tier 3: transforms in a TestPipeline -----------------------------------------


def test_drop_exact_duplicates():
    chunks = mixed_corpus()
    run_filter(chunks, DropExactDuplicates())(*expect(drop_exact(chunks)))


@pytest.mark.parametrize('threshold', [0.5, 0.8])
def test_drop_near_duplicates_matches_pure_filter(threshold):
    chunks = mixed_corpus() + with_minhash([make('z', 0, PARAGRAPH), make('z', 1, TYPO), make('z', 2, '')])
    b, r = MinHashConfig(threshold=threshold).bands()
    expected = expect(drop_minhash_groups(chunks, threshold))
    assert expected[1]  # there is something to find
    run_filter(chunks, DropNearDuplicates(threshold, b, r))(*expected)


def test_drop_randomly_matches_pure_filter():
    chunks = mixed_corpus()
    run_filter(chunks, DropRandomly(0.4, 5))(*expect(drop_random(chunks, 0.4, 5)))


def test_drop_intra_doc_redundancy_per_document():
    chunks = mixed_corpus()
    spec = dedup.FilterSpec('intra_doc', 0.9)
    kept, dropped = [], []
    for doc in sorted({c.doc_id for c in chunks}):
        k, d = intra_doc([c for c in chunks if c.doc_id == doc], 0.9)
        kept += k
        dropped += d
    assert dropped
    run_filter(chunks, DropIntraDocRedundancy(spec, dedup.FilterConfig()))(*expect((kept, dropped)))


SIMILARITY_FILTERS = ('similarity', 'similarity_topics', 'similarity_ner', 'similarity_topics_ner')


def pure_global(name, chunks):
    ordered = sorted(chunks, key=Chunk.sort_key)
    if name == 'ner_exact':
        return drop_ner_exact(ordered)
    if name == 'ner_half':
        return drop_ner_half(ordered)
    return drop_similar(ordered, 0.8, 'topics' in name, name.endswith('_ner'))


@pytest.mark.parametrize('max_posting', [2_000, 1])
def test_half_entity_overlaps_match_the_pure_filter(max_posting):
    # max_posting 1 caps every posting: the tiny corpus's edges are all to its first members anyway.
    chunks = mixed_corpus()
    kept, dropped = expect(pure_global('ner_half', chunks))
    assert dropped
    run_filter(chunks[::-1], DropHalfEntityOverlaps(dedup.FilterConfig(), 0, max_posting))(kept, dropped)


def test_grouped_ner_exact_matches_the_pure_filter():
    chunks = mixed_corpus()
    kept, dropped = expect(pure_global('ner_exact', chunks))
    assert dropped
    run_filter(chunks[::-1], DropByKey(dedup.FilterSpec('ner_exact'), dedup.FilterConfig()))(kept, dropped)


@pytest.mark.parametrize('cluster_size', [500, 3])
def test_similar_pairs_match_the_pure_greedy_filters(cluster_size):
    # cluster_size 3 makes several clusters of the small corpus: candidates
    # then come from the 3 nearest clusters only.
    chunks = mixed_corpus()
    with TestPipeline() as p:
        created = p | 'Create' >> beam.Create(chunks[::-1], reshuffle=False)
        for name in SIMILARITY_FILTERS:
            kept, dropped = expect(pure_global(name, chunks))
            assert dropped
            label = step_label(0, name)
            transform = DropSimilarPairs(dedup.FilterSpec(name), dedup.FilterConfig(), 0, 'topics' in name,
                                         name.endswith('_ner'), cluster_size=cluster_size)
            out = created | label >> transform
            assert_that(out[KEPT] | f'{label}KeptIds' >> beam.Map(chunk_id_of), equal_to(kept),
                        label=f'{label}CheckKept')
            assert_that(out[DROPPED] | f'{label}Decisions' >> beam.Map(decision_of), equal_to(dropped),
                        label=f'{label}CheckDropped')


def test_filter_chunks_in_sequence_accounts_for_every_chunk():
    chunks = mixed_corpus()
    config = dedup.FilterConfig(specs=tuple(dedup.parse_filters('exact,minhash@0.7,random@0.3')))
    kept, dropped_exact = drop_exact(chunks)
    kept, dropped_minhash = drop_minhash_groups(kept, 0.7)
    kept, dropped_random = drop_random(kept, 0.3, 0)
    expected = expect((kept, dropped_exact + dropped_minhash + dropped_random))
    assert len(expected[0]) + len(expected[1]) == len(chunks)
    run_filter(chunks, FilterChunks(config))(*expected)


def test_filter_chunks_without_filters_keeps_everything():
    chunks = mixed_corpus()
    run_filter(chunks, FilterChunks(dedup.FilterConfig()))([c.chunk_id for c in chunks], [])


def minhash_of(chunk: Chunk) -> tuple:
    return chunk.chunk_id, tuple(int(v) for v in chunk.minhash)


def test_compute_minhash_equals_signatures():
    chunks = [make('d', 0, PARAGRAPH), make('d', 1, TYPO), make('d', 2, OTHER)]
    config = MinHashConfig(num_perm=32, shingle_size=2)
    sigs = signatures([c.text for c in chunks], config)
    expected = [(c.chunk_id, tuple(int(v) for v in s)) for c, s in zip(chunks, sigs)]
    with TestPipeline() as p:
        out = p | beam.Create(chunks) | ComputeMinhash(config) | 'Sigs' >> beam.Map(minhash_of)
        assert_that(out, equal_to(expected))


def features_of(chunk: Chunk) -> tuple:
    return chunk.chunk_id, chunk.entities, chunk.topic, chunk.minhash is not None


def test_compute_features_only_those_asked_for():
    chunks = [make('d', 0, PARAGRAPH, embedding=unit(1, 0)), make('d', 1, OTHER, embedding=unit(0, 1))]
    config = dedup.FilterConfig(specs=(dedup.FilterSpec('similarity_topics_ner'),), n_topics=2)
    with TestPipeline() as p:
        # The chunks carry their embedding already (as from the feature cache).
        out = (p | beam.Create(chunks) | ComputeFeatures(config, ('entities', 'topics'))
               | 'Features' >> beam.Map(features_of))
        topic_ids = [int(t) for t in topics(np.stack([c.embedding for c in chunks]), 2)]
        assert_that(out, equal_to([
            ('d#0', ('FAC:macarthur park', 'FAC:the tower building of', 'GPE:arkansas', 'GPE:little rock',
                     "GPE:little rock's", 'ORG:the little rock arsenal', 'ORG:the u.s. arsenal building'),
             topic_ids[0], False),
            ('d#1', ('GPE:japan', 'NORP:valkyria', 'ORG:media', 'ORG:nameless', 'PERSON:sega',
                     'PERSON:valkyria chronicles iii'), topic_ids[1], False),
        ]))


def test_topics_do_not_depend_on_arrival_order():
    chunks = mixed_corpus()
    a = {c.chunk_id: c.topic for c in with_topics(chunks, 3, 0)}
    b = {c.chunk_id: c.topic for c in with_topics(chunks[::-1], 3, 0)}
    assert a == b and len(set(a.values())) == 3
    with TestPipeline() as p:
        out = p | beam.Create(chunks[::-1]) | AssignTopics(3, 0) | 'Topics' >> beam.Map(topic_of)
        assert_that(out, equal_to(sorted(a.items())))


def topic_of(chunk: Chunk) -> tuple:
    return chunk.chunk_id, chunk.topic
