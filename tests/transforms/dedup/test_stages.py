"""The generic filter stages on hand-made chunks, against the pure filter decisions; the feature plan.

The unit under test here is the Beam wiring (grouping, side inputs, tagged
outputs, counters), not the embedding model: embeddings are small hand-made
vectors. MinHash signatures and entities are computed with the real
libraries (datasketch, spaCy).
"""

from tests.helpers import BOILERPLATE, OTHER, expect, make, mixed_corpus, pure_global, run_filter, sorted_decisions
from transforms.dedup.config import FilterConfig, FilterSpec, parse_filters
from transforms.dedup.filters.exact import drop_exact
from transforms.dedup.filters.minhash.decision import drop_minhash_groups
from transforms.dedup.filters.random_control import drop_random
from transforms.dedup.stage_parts import DROPPED, step_label
from transforms.dedup.stages import (
    ApplyFilterFn,
    DropByKey,
    DropPerChunk,
    FilterChunks,
    PerChunkFn,
    decide_group,
    feature_plan,
)
from transforms.types import Chunk


def drop_exact_group(chunks):
    """The exact filter's decision over one group, as the grouped stage makes it."""
    return decide_group(chunks, FilterSpec('exact'), FilterConfig())


# --- tier 1: pure helpers ---------------------------------------------------------


def test_step_labels_are_camel_case():
    assert step_label(0, 'exact') == 'Filter0Exact'
    assert step_label(3, 'similarity_topics_ner') == 'Filter3SimilarityTopicsNer'


def test_exact_group_does_not_depend_on_arrival_order():
    chunks = [make('b', 0, BOILERPLATE), make('a', 2, BOILERPLATE, salience=0.2), make('a', 1, BOILERPLATE)]
    first = drop_exact_group(chunks)
    assert sorted_decisions(first[1]) == sorted_decisions(drop_exact_group(chunks[::-1])[1])
    assert [c.chunk_id for c in first[0]] == ['a#2']  # higher salience wins


# --- tier 2: DoFns called directly ------------------------------------------------


def test_random_fn_tags_dropped_chunks():
    fn = PerChunkFn(0, FilterSpec('random', 0.5), FilterConfig(random_seed=3))
    fn.setup()
    chunks = [make('d', i) for i in range(40)]
    outputs = [o for c in chunks for o in fn.process(c)]
    dropped = [o.value for o in outputs if getattr(o, 'tag', None) == DROPPED]
    kept = [o for o in outputs if isinstance(o, Chunk)]
    assert len(kept) + len(dropped) == 40 and 0 < len(dropped) < 40
    assert sorted_decisions(dropped) == sorted_decisions(drop_random(chunks, 0.5, 3)[1])


def test_apply_filter_fn_splits_a_group():
    fn = ApplyFilterFn(0, 'exact', drop_exact_group)
    fn.setup()
    outputs = list(fn.process([make('a', 0, BOILERPLATE), make('b', 0, BOILERPLATE), make('c', 0, OTHER)]))
    assert [o.chunk_id for o in outputs if isinstance(o, Chunk)] == ['a#0', 'c#0']
    assert [(o.tag, o.value.duplicate_of) for o in outputs if not isinstance(o, Chunk)] == [(DROPPED, 'a#0')]


# --- tier 3: transforms in a TestPipeline -----------------------------------------


def test_drop_exact_duplicates():
    chunks = mixed_corpus()
    run_filter(chunks, DropByKey(FilterSpec('exact'), FilterConfig()))(*expect(drop_exact(chunks)))


def test_drop_randomly_matches_pure_filter():
    chunks = mixed_corpus()
    run_filter(chunks, DropPerChunk(FilterSpec('random', 0.4), FilterConfig(random_seed=5)))(*expect(drop_random(chunks, 0.4, 5)))


def test_grouped_ner_exact_matches_the_pure_filter():
    chunks = mixed_corpus()
    kept, dropped = expect(pure_global('ner_exact', chunks))
    assert dropped
    run_filter(chunks[::-1], DropByKey(FilterSpec('ner_exact'), FilterConfig()))(kept, dropped)


def test_filter_chunks_in_sequence_accounts_for_every_chunk():
    chunks = mixed_corpus()
    config = FilterConfig(specs=tuple(parse_filters('exact,minhash@0.7,random@0.3')))
    kept, dropped_exact = drop_exact(chunks)
    kept, dropped_minhash = drop_minhash_groups(kept, 0.7)
    kept, dropped_random = drop_random(kept, 0.3, 0)
    expected = expect((kept, dropped_exact + dropped_minhash + dropped_random))
    assert len(expected[0]) + len(expected[1]) == len(chunks)
    run_filter(chunks, FilterChunks(config))(*expected)


def test_filter_chunks_without_filters_keeps_everything():
    chunks = mixed_corpus()
    run_filter(chunks, FilterChunks(FilterConfig()))([c.chunk_id for c in chunks], [])


# --- lazy features: which feature is computed before which filter -----------------


def plan(filters: str):
    return feature_plan(FilterConfig(specs=tuple(parse_filters(filters))))


def test_each_feature_just_before_its_first_use():
    # The default cascade embeds only what exact and minhash keep.
    assert plan('cascade') == [(), ('minhash',), ('embedding',), ()]
    # The user's order holds: an embedding filter first embeds everything.
    assert plan('intra_doc,exact,minhash') == [('embedding',), (), ('minhash',), ()]
    assert plan('exact,ner_exact,similarity_topics') == [(), ('entities',), ('embedding', 'topics'), ()]
    assert plan('minhash,similarity_topics_ner') == [('minhash',), ('embedding', 'entities', 'topics'), ()]


def test_kept_chunks_are_embedded_when_no_filter_was():
    assert plan('none') == [('embedding',)]
    assert plan('exact,minhash') == [(), ('minhash',), ('embedding',)]
    assert plan('random') == [(), ('embedding',)]
