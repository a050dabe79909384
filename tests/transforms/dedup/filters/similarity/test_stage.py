"""The similarity family's Beam stage (`DropSimilarPairs`) on hand-made chunks, against the pure greedy filters.

The unit under test here is the Beam wiring, not the embedding model:
embeddings are small hand-made vectors.
"""

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.helpers import chunk_id_of, decision_of, expect, mixed_corpus, pure_global
from transforms.dedup.config import FilterConfig, FilterSpec
from transforms.dedup.filters.similarity.stage import DropSimilarPairs
from transforms.dedup.stage_parts import DROPPED, KEPT, step_label

SIMILARITY_FILTERS = ('similarity', 'similarity_topics', 'similarity_ner', 'similarity_topics_ner')


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
            transform = DropSimilarPairs(FilterSpec(name), FilterConfig(), 0, 'topics' in name,
                                         name.endswith('_ner'), cluster_size=cluster_size)
            out = created | label >> transform
            assert_that(out[KEPT] | f'{label}KeptIds' >> beam.Map(chunk_id_of), equal_to(kept),
                        label=f'{label}CheckKept')
            assert_that(out[DROPPED] | f'{label}Decisions' >> beam.Map(decision_of), equal_to(dropped),
                        label=f'{label}CheckDropped')
