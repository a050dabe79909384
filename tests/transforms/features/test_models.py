"""The model fingerprint that keys the embedding cache."""

from transforms.features.embedding import embed_texts
from transforms.features.models import model_fingerprint


def test_fingerprint_does_not_change_when_the_model_embeds(embedding_model):
    # embed_texts sets the tokenizer's padding and truncation: the cache key must not follow them.
    before = model_fingerprint(embedding_model)
    embed_texts(embedding_model, ['a short text', 'a somewhat longer text ' * 20])
    assert model_fingerprint(embedding_model) == before


def test_loading_the_model_draws_no_transformers_progress_bar(capfd):
    from transformers.utils import logging as transformers_logging

    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    load_embedding_model(DEFAULT_EMBEDDING_MODEL, kernel_mode=None)
    assert 'Loading weights' not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()  # given back to whoever else loads a model
