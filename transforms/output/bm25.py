"""BM25 over the kept chunks: its tokenizer and its files, built part by part."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Iterable, Mapping, Sequence

import numpy as np

# Written at index time and read back at query time, so both sides tokenize alike.
BM25_TOKENIZER = {'lower': True, 'stopwords': 'english'}
BM25_TOKENIZER_FILE = 'tokenizer.json'


def bm25s_module():
    """Imports bm25s, which sets its own logger to DEBUG; quiet it to warnings."""
    import bm25s

    logging.getLogger('bm25s').setLevel(logging.WARNING)
    return bm25s


def bm25_tokenize(texts: Sequence[str], tokenizer: Mapping = BM25_TOKENIZER, return_ids: bool = True):
    """Tokenizes texts the way the BM25 index expects."""
    bm25s = bm25s_module()
    return bm25s.tokenize(list(texts), return_ids=return_ids, show_progress=False, **tokenizer)


def tokenize_batches(batches: Iterable[Sequence[str]], tokenizer: Mapping = BM25_TOKENIZER):
    """Tokenizes batches of texts into one vocabulary, as one `bm25_tokenize` of them all would.

    bm25s numbers tokens in order of first occurrence; each batch is
    tokenized alone and its ids renumbered into the running vocabulary, so
    the ids equal those of one call on the concatenation. Token ids are kept
    as compact int32 arrays, one per text.

    Returns:
      `bm25s.tokenization.Tokenized(ids, vocab)`.
    """
    import array

    bm25s = bm25s_module()
    vocab: dict[str, int] = {}
    ids: list = []
    for texts in batches:
        if not texts:
            continue
        local = bm25_tokenize(texts, tokenizer)
        # local ids number the batch's tokens in order of first occurrence
        to_global = [vocab.setdefault(token, len(vocab)) for token in local.vocab]
        for doc in local.ids:
            ids.append(array.array('i', [to_global[i] for i in doc]))
    return bm25s.tokenization.Tokenized(ids=ids, vocab=vocab)


def build_bm25(texts: Sequence[str]):
    """An in-memory BM25 index (bm25s, default Lucene parameters); row i = texts[i].

    Raises:
      ValueError: if `texts` is empty (bm25s cannot index nothing).
    """
    return build_bm25_of_batches([texts])


def build_bm25_of_batches(batches: Iterable[Sequence[str]]):
    """`build_bm25` of the texts of all batches in order, tokenized one batch at a time.

    bm25s indexes from every text's token ids at once, so those (4 bytes per
    token) and the vocabulary are held; the texts are not.

    Raises:
      ValueError: if there is no text (bm25s cannot index nothing).
    """
    tokenized = tokenize_batches(batches)
    if not tokenized.ids:
        raise ValueError('cannot build a BM25 index of no texts')
    bm25s = bm25s_module()
    if not tokenized.vocab:
        # Every text is stopwords or punctuation ("!!!"): bm25s cannot index an
        # empty vocabulary. The empty string, which no query token can be, as
        # the only entry scores every row 0, as no shared term would.
        tokenized = bm25s.tokenization.Tokenized(ids=tokenized.ids, vocab={'': 0})
    retriever = bm25s.BM25()
    # Texts without a term have length 0: their (unused) length norm divides by 0.
    with np.errstate(divide='ignore', invalid='ignore'):
        retriever.index(tokenized, show_progress=False)
    return retriever


def bm25_files(texts: Sequence[str]) -> dict[str, bytes]:
    """A BM25 index (bm25s, default Lucene parameters) of `texts`, as files.

    Row i of the index is texts[i]. The corpus itself is not stored: the
    chunks table has it. The tokenizer settings are stored alongside, in
    BM25_TOKENIZER_FILE.

    Returns:
      File name -> bytes, identical for identical texts.

    Raises:
      ValueError: if `texts` is empty (bm25s cannot index nothing).
    """
    return bm25_files_of_batches([texts])


def bm25_files_of_batches(batches: Iterable[Sequence[str]]) -> dict[str, bytes]:
    """`bm25_files` of the texts of all batches in order (e.g. the parts of the chunks table).

    The same bytes as `bm25_files` of the concatenated texts.
    """
    retriever = build_bm25_of_batches(batches)
    files = {}
    with tempfile.TemporaryDirectory() as tmp:
        retriever.save(tmp, show_progress=False)
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), 'rb') as f:
                files[name] = f.read()
    files[BM25_TOKENIZER_FILE] = (json.dumps(BM25_TOKENIZER, sort_keys=True) + '\n').encode('utf-8')
    return files
