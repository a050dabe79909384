"""The evaluation's feature store: what it computes once is keyed by what it depends on."""

from transforms.dedup.config import FilterConfig
from transforms.evaluation.features import FeatureStore
from transforms.types import Document


def test_token_indexes_are_per_text_not_per_doc_id(embedding_model):
    # Two sets scored with one store (benchmarks/studies/relevance_floor.py) both have a passage `p0`.
    store = FeatureStore(embedding_model, 8, FilterConfig().features, None)
    first = store.tokens(Document('p0', 'A short passage.', 'a/corpus.jsonl'))
    second = store.tokens(Document('p0', 'Another, rather longer passage of the second set.', 'b/corpus.jsonl'))
    assert first is not second
    assert store.tokens(Document('p9', 'A short passage.', 'c/corpus.jsonl')) is first
