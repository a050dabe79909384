"""BM25 over the kept chunks: its tokenizer and its files, built part by part."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import shutil
import tempfile
from typing import BinaryIO, Callable, ContextManager, Iterable, Mapping, Sequence

import numpy as np

# Written at index time and read back at query time, so both sides tokenize alike.
BM25_TOKENIZER = {'lower': True, 'stopwords': 'english'}
BM25_TOKENIZER_FILE = 'tokenizer.json'
# Score-matrix entries one merge block of `write_bm25_files` holds (some 32 bytes each while sorted).
BM25_BLOCK_ENTRIES = 1 << 20
# The score matrix's files, as bm25s's `BM25.save` names them: CSC data, indices (texts), indptr (tokens).
_DATA_FILE = 'data.csc.index.npy'
_INDICES_FILE = 'indices.csc.index.npy'
_INDPTR_FILE = 'indptr.csc.index.npy'


def bm25s_module():
    """Imports bm25s, which sets its own logger to DEBUG; quiet it to warnings."""
    import bm25s

    logging.getLogger('bm25s').setLevel(logging.WARNING)
    return bm25s


def bm25_tokenize(texts: Sequence[str], tokenizer: Mapping = BM25_TOKENIZER, return_ids: bool = True):
    """Tokenizes texts the way the BM25 index expects."""
    bm25s = bm25s_module()
    return bm25s.tokenize(list(texts), return_ids=return_ids, show_progress=False, **tokenizer)


def global_token_ids(batches: Iterable[Sequence[str]], vocab: dict, tokenizer: Mapping = BM25_TOKENIZER):
    """Each non-empty batch's token ids, one list per text, numbered in the running vocabulary `vocab`.

    bm25s numbers tokens in order of first occurrence; each batch is
    tokenized alone and its ids renumbered into `vocab` (grown in place), so
    the ids equal those of one `bm25_tokenize` of the concatenation.

    Yields:
      Per batch, a list of token id lists, one per text.
    """
    for texts in batches:
        if not texts:
            continue
        local = bm25_tokenize(texts, tokenizer)
        # local ids number the batch's tokens in order of first occurrence
        to_global = [vocab.setdefault(token, len(vocab)) for token in local.vocab]
        yield [[to_global[i] for i in doc] for doc in local.ids]


def tokenize_batches(batches: Iterable[Sequence[str]], tokenizer: Mapping = BM25_TOKENIZER):
    """Tokenizes batches of texts into one vocabulary, as one `bm25_tokenize` of them all would.

    See `global_token_ids`; token ids are kept as compact int32 arrays, one per text.

    Returns:
      `bm25s.tokenization.Tokenized(ids, vocab)`.
    """
    import array

    bm25s = bm25s_module()
    vocab: dict[str, int] = {}
    ids: list = []
    for batch in global_token_ids(batches, vocab, tokenizer):
        ids.extend(array.array('i', doc) for doc in batch)
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
    files[BM25_TOKENIZER_FILE] = tokenizer_file_bytes()
    return files


def tokenizer_file_bytes() -> bytes:
    """The BM25_TOKENIZER_FILE: the tokenizer settings, read back at query time."""
    return (json.dumps(BM25_TOKENIZER, sort_keys=True) + '\n').encode('utf-8')


# --- the same files in bounded memory: two passes over the batches, then a merge -------------------------------


@dataclasses.dataclass
class _Counts:
    """What the first pass learns: the vocabulary and the statistics BM25's idf and length norm need."""

    vocab: dict
    doc_freqs: np.ndarray  # per token id, the texts that hold it (int64)
    n_docs: int
    total_len: int  # tokens in all texts


def write_bm25_files(batches: Callable[[], Iterable[Sequence[str]]],
                     create: Callable[[str], ContextManager[BinaryIO]],
                     block_entries: int = BM25_BLOCK_ENTRIES) -> int:
    """Writes the files of `bm25_files_of_batches`, byte for byte, holding neither the corpus nor its matrix.

    Pass 1 tokenizes the batches into the vocabulary and counts, per token,
    the texts that hold it; pass 2 tokenizes them again and scores each batch
    with bm25s's own functions and the whole corpus's idf and mean length,
    spilling its entries, sorted as the CSC matrix is, to a local temporary
    directory; the merge then writes the matrix column block by column block.
    Memory is the vocabulary, one batch and one block; the spill takes about
    12 bytes of local disk per (text, distinct token) pair.

    Args:
      batches: Returns a fresh iterator of the batches of texts, in order,
        each time it is called (it is called twice).
      create: Opens a file of the index, by name, for writing: a context
        manager of a binary file (e.g. `storage.create` under a directory).
      block_entries: The most matrix entries a merge block holds; a token in
        more texts than that is streamed alone.

    Returns:
      The number of documents (texts) indexed.

    Raises:
      ValueError: If there is no text (bm25s cannot index nothing), or
        `block_entries` is below 1.
      RuntimeError: If the second pass does not give the texts of the first.
    """
    if block_entries < 1:
        raise ValueError(f'block_entries must be >= 1, got {block_entries}')
    # The default retriever, as `build_bm25_of_batches` indexes with: its settings and its `save`.
    settings = bm25s_module().BM25()
    counts = _count_terms(batches())
    blocks = column_blocks(counts.doc_freqs, block_entries)
    with tempfile.TemporaryDirectory(prefix='ragsieve-bm25-') as spill:
        parts = _spill_scores(batches(), counts, settings, blocks, spill)
        _merge_scores(spill, parts, counts, settings, blocks, block_entries, create)
    _write_vocab_and_params(counts, settings, create)
    with create(BM25_TOKENIZER_FILE) as f:
        f.write(tokenizer_file_bytes())
    return counts.n_docs


def _count_terms(batches: Iterable[Sequence[str]]) -> _Counts:
    """Pass 1: the vocabulary, each token's document frequency, the texts and their total length."""
    vocab: dict[str, int] = {}
    doc_freqs = np.zeros(0, np.int64)
    n_docs = total_len = 0
    for ids in global_token_ids(batches, vocab):
        n_docs += len(ids)
        total_len += sum(map(len, ids))
        held = np.fromiter(itertools.chain.from_iterable(set(doc) for doc in ids), np.int64)
        doc_freqs = np.pad(doc_freqs, (0, len(vocab) - len(doc_freqs)))
        doc_freqs += np.bincount(held, minlength=len(vocab))
    if not n_docs:
        raise ValueError('cannot build a BM25 index of no texts')
    if not vocab:
        # As in `build_bm25_of_batches`: the empty string alone, in no text.
        vocab, doc_freqs = {'': 0}, np.zeros(1, np.int64)
    return _Counts(vocab, doc_freqs, n_docs, total_len)


def column_blocks(doc_freqs: np.ndarray, budget: int) -> np.ndarray:
    """Where the merge's column blocks start, then the column count.

    A block is the longest run of columns (tokens) of at most `budget`
    entries in all, or a single column that has more.
    """
    ends = np.zeros(len(doc_freqs) + 1, np.int64)
    np.cumsum(doc_freqs, out=ends[1:])
    starts = [0]
    while starts[-1] < len(doc_freqs):
        first = starts[-1]
        after = int(np.searchsorted(ends, ends[first] + budget, side='right')) - 1
        starts.append(max(after, first + 1))
    return np.array(starts, np.int64)


def _spill_scores(batches: Iterable[Sequence[str]], counts: _Counts, settings, blocks: np.ndarray, spill: str) -> int:
    """Pass 2: each batch's matrix entries, in CSC order, appended to the spill files; returns the batches.

    `data` (scores), `rows` (texts) and `cols` (tokens) get the entries,
    sorted by token then text as bm25s's CSC builder sorts them; `bounds`
    gets, per batch, where each column block starts in them, so the merge
    reads each batch's slice of a block in one read.
    """
    from bm25s import scoring

    n_vocab = len(counts.vocab)
    idf = scoring._build_idf_array(
        doc_frequencies=dict(enumerate(counts.doc_freqs.tolist())), n_docs=counts.n_docs,
        compute_idf_fn=scoring._select_idf_scorer(settings.idf_method), dtype=settings.dtype)
    # What bm25s's `np.array(lengths).mean()` gives: an exact float64 sum of integers, divided.
    avg_doc_len = np.float64(counts.total_len) / counts.n_docs
    offset = parts = written = 0
    with contextlib.ExitStack() as stack:
        out = {name: stack.enter_context(open(os.path.join(spill, name), 'wb'))
               for name in ('data', 'rows', 'cols', 'bounds')}
        for ids in global_token_ids(batches, counts.vocab):
            if len(counts.vocab) != n_vocab or offset + len(ids) > counts.n_docs:
                raise RuntimeError('the texts changed between the two passes over them')
            # bm25s sizes its arrays by the sum of the frequencies it is given: the batch's (text, token) pairs.
            pairs = sum(len(set(doc)) for doc in ids)
            # Texts without a term have length 0: their (unused) length norm may divide by 0.
            with np.errstate(divide='ignore', invalid='ignore'):
                scores, docs, cols = scoring._build_scores_and_indices_for_matrix(
                    corpus_token_ids=ids, idf_array=idf, avg_doc_len=avg_doc_len, doc_frequencies={None: pairs},
                    k1=settings.k1, b=settings.b, delta=settings.delta, nonoccurrence_array=None,
                    method=settings.method, dtype=settings.dtype, int_dtype=settings.int_dtype, show_progress=False)
            rows = docs + offset
            # (token, text) pairs are unique, so any sort gives the order bm25s's CSC builder gives.
            order = np.argsort((cols.astype(np.int64) << 32) | rows)
            cols = cols[order]
            scores[order].tofile(out['data'])
            rows[order].tofile(out['rows'])
            cols.tofile(out['cols'])
            (written + np.searchsorted(cols, blocks)).astype(np.int64).tofile(out['bounds'])
            offset += len(ids)
            written += len(order)
            parts += 1
    if offset != counts.n_docs or written != counts.doc_freqs.sum():
        raise RuntimeError('the texts changed between the two passes over them')
    return parts


def _read(f: BinaryIO, dtype, start: int, count: int) -> np.ndarray:
    """Items [start, start + count) of a raw array file of `dtype`."""
    itemsize = np.dtype(dtype).itemsize
    f.seek(start * itemsize)
    return np.frombuffer(f.read(count * itemsize), dtype)


def _write_npy_header(f: BinaryIO, dtype, length: int) -> None:
    """The header `np.save` writes before a 1-D array of `length` items of `dtype`."""
    np.lib.format.write_array_header_1_0(
        f, {'descr': np.lib.format.dtype_to_descr(np.dtype(dtype)), 'fortran_order': False, 'shape': (int(length),)})


def _merge_scores(spill: str, parts: int, counts: _Counts, settings, blocks: np.ndarray, block_entries: int,
                  create: Callable[[str], ContextManager[BinaryIO]]) -> None:
    """Writes the CSC data, indices and indptr files from the spilled batches, one column block at a time.

    Batches hold consecutive texts, so within a column the batches' entries,
    taken in batch order, are in text order: a block is its batches' slices
    stably sorted by column, and a single column needs no sort at all.
    """
    indptr = np.zeros(len(counts.doc_freqs) + 1, np.int64)
    np.cumsum(counts.doc_freqs, out=indptr[1:])
    n_bounds = len(blocks)
    with contextlib.ExitStack() as stack:
        spilled = {name: stack.enter_context(open(os.path.join(spill, name), 'rb'))
                   for name in ('data', 'rows', 'cols', 'bounds')}
        data_file = stack.enter_context(create(_DATA_FILE))
        indices_file = stack.enter_context(create(_INDICES_FILE))
        _write_npy_header(data_file, settings.dtype, indptr[-1])
        _write_npy_header(indices_file, settings.int_dtype, indptr[-1])
        for block in range(n_bounds - 1):
            slices = [_read(spilled['bounds'], np.int64, part * n_bounds + block, 2).tolist() for part in range(parts)]
            if blocks[block + 1] - blocks[block] == 1:
                for first, end in slices:
                    for start in range(first, end, block_entries):
                        count = min(block_entries, end - start)
                        data_file.write(_read(spilled['data'], settings.dtype, start, count).tobytes())
                        indices_file.write(_read(spilled['rows'], settings.int_dtype, start, count).tobytes())
                continue
            cols = np.concatenate([_read(spilled['cols'], settings.int_dtype, a, b - a) for a, b in slices])
            order = np.argsort(cols, kind='stable')
            data = np.concatenate([_read(spilled['data'], settings.dtype, a, b - a) for a, b in slices])
            data_file.write(data[order].tobytes())
            rows = np.concatenate([_read(spilled['rows'], settings.int_dtype, a, b - a) for a, b in slices])
            indices_file.write(rows[order].tobytes())
    with create(_INDPTR_FILE) as f:
        np.save(f, indptr)


def _write_vocab_and_params(counts: _Counts, settings, create: Callable[[str], ContextManager[BinaryIO]]) -> None:
    """The vocabulary and parameter files, written by bm25s's own `save` of an index with an empty matrix."""
    vocab = counts.vocab
    if '' not in vocab:
        # What `BM25.index(create_empty_token=True)` adds: the empty token, after every other.
        vocab[''] = max(vocab.values()) + 1
    settings.scores = {'data': np.zeros(0, settings.dtype), 'indices': np.zeros(0, settings.int_dtype),
                       'indptr': np.zeros(1, np.int64), 'num_docs': counts.n_docs}
    settings.vocab_dict = vocab
    settings.nonoccurrence_array = None
    with tempfile.TemporaryDirectory(prefix='ragsieve-bm25-') as tmp:
        settings.save(tmp, show_progress=False)
        for name in sorted(os.listdir(tmp)):
            if name in (_DATA_FILE, _INDICES_FILE, _INDPTR_FILE):
                continue
            with open(os.path.join(tmp, name), 'rb') as src, create(name) as dst:
                shutil.copyfileobj(src, dst)
