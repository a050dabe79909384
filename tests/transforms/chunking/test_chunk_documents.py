"""The chunking DoFns, called directly with the real model's tokenizer."""

from transforms.chunking.chunk_documents import _ChunkDocumentFn, _ChunkWithCachedSpansFn
from transforms.chunking.chunkers import ChunkerConfig
from transforms.features import cache as feature_cache
from transforms.features.embedding import SharedModel
from transforms.features.models import DEFAULT_EMBEDDING_MODEL
from transforms.text import text_key
from transforms.types import Document

TEXT = 'Cook the pasta in salted water. Drain it and toss it with the sauce. Serve it hot.'
CONFIG = ChunkerConfig('recursive', 8, 0)


def make(fn_class):
    fn = fn_class(SharedModel(DEFAULT_EMBEDDING_MODEL), CONFIG, 16)
    fn.setup()
    return fn


def test_cached_spans_are_used_and_new_ones_computed_and_emitted():
    document = Document('d', TEXT, 'd.txt')
    fresh = list(make(_ChunkDocumentFn).process(document))
    computed = make(_ChunkDocumentFn).spans_of(document)
    assert [(c.char_start, c.char_end, c.n_tokens) for c in fresh] == computed

    fn = make(_ChunkWithCachedSpansFn)
    key = text_key(TEXT)
    out = list(fn.process((key, {'documents': [document], feature_cache.SPANS: []})))
    spans = [o.value for o in out if hasattr(o, 'tag')]
    assert spans == [(key, computed)]
    assert [o for o in out if not hasattr(o, 'tag')] == fresh

    # A cache hit is taken as is (flattened, as read from Parquet), without tokenizing.
    cached = [0, 31, 7]
    out = list(fn.process((key, {'documents': [document], feature_cache.SPANS: [cached]})))
    chunks = [o for o in out if not hasattr(o, 'tag')]
    assert [(c.text, c.n_tokens) for c in chunks] == [('Cook the pasta in salted water.', 7)]
    assert [o.value for o in out if hasattr(o, 'tag')] == [(key, ((0, 31, 7),))]
