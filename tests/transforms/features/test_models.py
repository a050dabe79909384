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


def test_token_counts_hold_while_another_thread_embeds(embedding_model):
    # An engine's SDK worker runs the bundles of several task slots as threads of one process, all on one
    # tokenizer: embedding sets its padding and truncation, which a count in the other thread picked up
    # (n_tokens 32 for a text of 19, about 1 call in 1,500 before the fix).
    import threading

    from transforms.chunking.chunkers import token_offsets

    text = 'In the zebra case, sequence repetition is performed; a negative repetition factor yields an empty sequence.'
    alone = len(token_offsets(embedding_model.tokenizer, text))
    done = threading.Event()

    def embed():
        while not done.is_set():
            embed_texts(embedding_model, ['a short text'] * 8)

    embedding = threading.Thread(target=embed)
    embedding.start()
    try:
        counts = [len(token_offsets(embedding_model.tokenizer, text)) for _ in range(6000)]
    finally:
        done.set()
        embedding.join()
    assert set(counts) == {alone}
