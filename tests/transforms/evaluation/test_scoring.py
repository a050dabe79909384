"""One chunker's scoring: the query job's ranking over the chunks a filter kept."""

import numpy as np

from tests.helpers import _chunk
from transforms.evaluation import scoring
from transforms.query import retrieval


def test_hybrid_top_k_dedups_and_respects_kept_rows(embedding_model):
    texts = ['Saturn has rings of ice and rock.', 'Saturn has rings of ice and rock!',
             'Pasta is cooked in salted water.', 'Jupiter is the largest planet.']
    vectors = embedding_model.encode(texts, normalize_embeddings=True)
    chunks = [_chunk('d', i, t, v) for i, (t, v) in enumerate(zip(texts, vectors))]
    question = 'What are the rings of Saturn made of?'
    query = embedding_model.encode([question], normalize_embeddings=True)
    config = retrieval.RetrievalConfig(min_relevance=-1.0)
    [hits] = scoring.hybrid_top_k(chunks, np.arange(4), vectors, [question], query, 3, config)
    assert hits[0] in (0, 1) and not {0, 1} <= set(hits)  # the near-copy is skipped
    assert len(hits) == 3
    [hits] = scoring.hybrid_top_k(chunks[2:], np.array([2, 3]), vectors, [question], query, 3, config)
    assert set(hits) <= {2, 3}
    assert scoring.hybrid_top_k([], np.array([], np.int64), vectors, [question], query, 3, config) == [[]]
