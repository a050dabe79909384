"""The Retriever: one built index read into memory, searched by hybrid retrieval."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import time
from typing import Optional, Sequence

import numpy as np

from transforms import storage
from transforms.features.embedding import embed_texts
from transforms.features.models import load_embedding_model, resolve_model_path
from transforms.output import digests, indexes, tables
from transforms.output.bm25 import BM25_TOKENIZER, BM25_TOKENIZER_FILE, bm25_tokenize, bm25s_module, build_bm25
from transforms.query import opening, retrieval
from transforms.query import where as where_filter

LOG = logging.getLogger('ragsieve.query')

# Everything a query needs; all written by the build (bm25/ only when chunks were kept).
REQUIRED_FILES = (
    tables.MANIFEST_FILE,
    f'{tables.INDEX_DIR}/{tables.INDEX_FILE}',
    f'{tables.INDEX_DIR}/{tables.IDS_FILE}',
)

CHUNK_COLUMNS = ['chunk_id', 'doc_id', 'char_start', 'char_end', 'text', 'embedding', 'metadata', 'salience']


@dataclasses.dataclass(frozen=True)
class Hit:
    """One chunk of a ranking.

    Attributes:
      chunk_id, doc_id, char_start, char_end, text: The chunk, as in chunks/.
      score: Its fused score (transforms/query/retrieval.py).
      cosine: Dense cosine similarity to the query.
      ranks: Rank per signal among the candidates; None where the signal
        gave it nothing (see transforms/retrieval.py).
      matched_by: With a `where` filter, the documents whose metadata
        admitted the chunk: its own first when it matches, then documents it
        represents (transforms/where.py); None without a filter.
    """

    chunk_id: str
    doc_id: str
    char_start: int
    char_end: int
    text: str
    score: float
    cosine: float
    ranks: dict
    matched_by: Optional[list] = None


@dataclasses.dataclass(frozen=True)
class SkippedHit:
    """A chunk skipped by post-ranking dedup, and the selected chunk it duplicates."""

    hit: Hit
    duplicate_of: str
    cosine: float


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """What `Retriever.search` returns.

    Attributes:
      hits: At most k chunks, best first.
      skipped: Chunks skipped as duplicates before the k-th hit, in fused order.
      seconds: Wall time of 'embed', 'search' (dense + BM25), 'fusion' and 'dedup'.
    """

    hits: list
    skipped: list
    seconds: dict

    def to_json(self) -> list[dict]:
        """The JSON output: one object per hit, with the duplicates skipped for it."""
        out = []
        for h in self.hits:
            item = dataclasses.asdict(h)
            if h.matched_by is None:  # no --where: the output stays as it was
                del item['matched_by']
            item['duplicates'] = [
                {'chunk_id': s.hit.chunk_id, 'doc_id': s.hit.doc_id, 'cosine': s.cosine,
                 'score': s.hit.score, 'ranks': s.hit.ranks}
                for s in self.skipped if s.duplicate_of == h.chunk_id
            ]
            out.append(item)
        return out


# What a query reads of manifest.json, with the type of each value: a manifest
# of another shape is refused as corrupt before anything reads it.
MANIFEST_SHAPE = {'counts': {'chunks': int}, 'model': {'dim': int}, 'config': {'embedding': {'model': str}}}
_TYPE_NAMES = {dict: 'an object', int: 'an integer', str: 'a string'}


def shape_problem(value, shape, where: str = '') -> Optional[str]:
    """Where `value` departs from `shape` (nested dicts of types), in a few words, or None.

    E.g. `counts is 5, not an object` or `it has no model.dim`.
    """
    wanted = dict if isinstance(shape, dict) else shape
    if not isinstance(value, wanted) or isinstance(value, bool):
        shown = json.dumps(value)
        shown = shown if len(shown) <= 40 else shown[:37] + '...'
        return f'{where or "it"} is {shown}, not {_TYPE_NAMES[wanted]}'
    if not isinstance(shape, dict):
        return None
    for key, inner in shape.items():
        path = f'{where}.{key}' if where else key
        if key not in value:
            return f'it has no {path}'
        problem = shape_problem(value[key], inner, path)
        if problem:
            return problem
    return None


def check_index_dir(index: str) -> dict:
    """Checks that `index` holds a complete local ragsieve index; returns its manifest.

    Raises:
      ValueError: if the directory or one of its files is missing, the
        manifest is not JSON of the shape a build writes (`MANIFEST_SHAPE`),
        or a file is not the one the build wrote (`digests.check_files`).
    """
    if not os.path.isdir(index):
        raise ValueError(f'--index {index!r} is not a directory')
    missing = [f for f in REQUIRED_FILES if not os.path.isfile(os.path.join(index, f))]
    try:
        tables.part_paths(os.path.join(index, tables.CHUNKS_DIR))
    except ValueError:
        missing.append(f'{tables.CHUNKS_DIR}/ (all its parts)')
    if tables.MANIFEST_FILE in missing:
        raise ValueError(f'--index {index!r} is not a ragsieve index: no {tables.MANIFEST_FILE}')
    if missing:
        raise ValueError(f'--index {index!r} is incomplete: missing {", ".join(missing)}')
    path = os.path.join(index, tables.MANIFEST_FILE)
    manifest = tables.load_file(path, _read_json)
    problem = shape_problem(manifest, MANIFEST_SHAPE)
    if problem:
        raise ValueError(f'{path} is corrupt: {problem}')
    if manifest['counts']['chunks'] and not os.path.isdir(os.path.join(index, tables.BM25_DIR)):
        raise ValueError(
            f'--index {index!r} is incomplete: missing {tables.BM25_DIR}/ (built before BM25 was '
            'part of the index? rebuild it)')
    digests.check_files(index, manifest)
    return manifest


def load_bm25(directory: str):
    """The BM25 index of `directory`; a failure names the file that broke it.

    Raises:
      ValueError: As `tables.load_file` does.
    """
    try:
        return bm25s_module().BM25.load(directory, show_progress=False)
    except Exception:
        # bm25s reads several files without saying which one failed: find it.
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if name.endswith('.npy'):
                tables.load_file(path, lambda p: np.load(p, allow_pickle=False))
            elif name.endswith('.json'):
                tables.load_file(path, _read_json)
        return tables.load_file(directory, lambda p: bm25s_module().BM25.load(p, show_progress=False))


def _read_json(path: str):
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def set_search_parameters(index, nprobe: Optional[int] = None, ef_search: Optional[int] = None) -> None:
    """Sets `nprobe` (IVF) and `efSearch` (HNSW) on a FAISS index of any factory type.

    Raises:
      ValueError: For a value < 1, or a parameter the index type does not have
        (e.g. --nprobe on a Flat or HNSW index).
    """
    import faiss

    space = faiss.ParameterSpace()
    for flag, name, value in (('--nprobe', 'nprobe', nprobe), ('--ef_search', 'efSearch', ef_search)):
        if value is None:
            continue
        if value < 1:
            raise ValueError(f'{flag} must be >= 1, got {value}')
        try:
            space.set_index_parameter(index, name, value)
        except RuntimeError as e:
            raise ValueError(f'{flag} does not apply to a {type(index).__name__} index') from e


def index_model(manifest: dict) -> tuple[str, int]:
    """The embedding model name and dimension an index was built with."""
    try:
        return manifest['config']['embedding']['model'], int(manifest['model']['dim'])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f'{tables.MANIFEST_FILE} has no embedding model and dim ({e!r})') from e


class Retriever:
    """Answers many queries over one index; loads everything once.

    Args:
      index: Directory of a built index, or a versioned root (its LATEST run); local or on an object store.
      config: Ranking settings.
      model: An already loaded sentence-transformers model; by default the
        index's own model is loaded.
      model_name: Name or path of the model to query with (of `model` when
        given); must be the one the index was built with.
      device: Torch device when the model is loaded here.
      nprobe: IVF lists searched per query (IVF index types); None = FAISS's default (1).
      ef_search: HNSW candidate list size (HNSW index types); None = FAISS's default (16).

    Raises:
      ValueError: for a missing or incomplete index, a model other than the
        index's (name or dimension), a search parameter the index type lacks,
        or a store that refuses it (a URL without a bucket, a missing or
        denied bucket, refused credentials: `opening.open_index`).
    """

    def __init__(
        self,
        index: str,
        config: retrieval.RetrievalConfig = retrieval.RetrievalConfig(),
        model=None,
        model_name: Optional[str] = None,
        device: str = 'cpu',
        nprobe: Optional[int] = None,
        ef_search: Optional[int] = None,
    ):
        self.config = config

        def load(directory: str) -> None:
            self._load_from(directory, model, model_name, device, nprobe, ef_search)

        # Every file of the run is read here, into memory; a run pruned meanwhile is read from LATEST once more.
        opening.open_index(index, load)

    def _load_from(self, directory: str, *args) -> None:
        """`_load` of a local run, or of a local copy of a remote one (FAISS and bm25s open files by name).

        The copy is checked against the manifest's digests like a local run,
        and errors name the remote files, not the copy's.
        """
        with storage.local_copy(directory) as local:
            try:
                self._load(local, *args)
            except ValueError as e:
                if local == directory:
                    raise
                raise ValueError(str(e).replace(local, directory)) from None
        self.index = directory

    def _load(self, index: str, model, model_name: Optional[str], device: str,
              nprobe: Optional[int], ef_search: Optional[int]) -> None:
        import faiss
        import pyarrow.parquet as pq

        self.index = index
        manifest = check_index_dir(index)
        built_name, built_dim = index_model(manifest)
        if model_name is not None and resolve_model_path(model_name) != resolve_model_path(built_name):
            raise ValueError(
                f'the index was built with embedding model {built_name!r}, not {model_name!r}: '
                'query it with the same model')
        if model is None:
            # A query vector is not stored: the service's own kernels are left as they are.
            model = load_embedding_model(built_name, device, kernel_mode=None)
        dim = model.get_embedding_dimension()
        if dim != built_dim:
            raise ValueError(
                f'the index was built with {built_dim}-dimensional embeddings ({built_name!r}) '
                f'but the query model gives {dim}: query it with the same model')
        self.model = model
        self.dim = built_dim

        table = tables.read_table(os.path.join(index, tables.CHUNKS_DIR), CHUNK_COLUMNS)
        ids = tables.load_file(os.path.join(index, tables.INDEX_DIR, tables.IDS_FILE),
                              lambda p: pq.read_table(p).column('chunk_id').to_pylist())
        faiss_file = os.path.join(index, tables.INDEX_DIR, tables.INDEX_FILE)
        self.faiss = tables.load_file(faiss_file, faiss.read_index)
        if self.faiss.d != built_dim:
            raise ValueError(f'{faiss_file} is corrupt: {self.faiss.d}-dimensional, the manifest says {built_dim}')
        set_search_parameters(self.faiss, nprobe=nprobe, ef_search=ef_search)
        self.chunk_ids = table.column('chunk_id').to_pylist()
        if ids != self.chunk_ids or self.faiss.ntotal != len(ids):
            raise ValueError(
                f'--index {index!r} is inconsistent: chunks ({len(self.chunk_ids)}), ids.parquet '
                f'({len(ids)}) and index.faiss ({self.faiss.ntotal}) do not list the same chunks')
        self.doc_ids = table.column('doc_id').to_pylist()
        self.char_starts = table.column('char_start').to_pylist()
        self.char_ends = table.column('char_end').to_pylist()
        self.texts = table.column('text').to_pylist()
        n = len(ids)
        # Straight from Arrow: a Python float per value held 18 GB at its peak for 843k chunks.
        self.embeddings = indexes.part_vectors(table, built_dim)
        self.salience = table.column('salience').to_pylist()
        self.timestamps = [retrieval.document_timestamp(m) for m in table.column('metadata').to_pylist()]
        self.bm25 = None
        self.bm25_tokenizer = BM25_TOKENIZER
        if n:
            bm25_dir = os.path.join(index, tables.BM25_DIR)
            self.bm25 = load_bm25(bm25_dir)
            tokenizer_file = os.path.join(bm25_dir, BM25_TOKENIZER_FILE)
            if os.path.isfile(tokenizer_file):
                self.bm25_tokenizer = tables.load_file(tokenizer_file, _read_json)
        # Loaded now, not on the first filtered query: a reader holds every file
        # of its run from the start, so pruning cannot take one away later.
        self._metadata_filter = tables.load_file(
            os.path.join(index, tables.DOCUMENTS_DIR),
            lambda p: where_filter.load_metadata_filter(index, self.chunk_ids))

    @classmethod
    def of_chunks(cls, chunks: Sequence, model, config: retrieval.RetrievalConfig = retrieval.RetrievalConfig(),
                  vectors: Optional[np.ndarray] = None) -> 'Retriever':
        """A Retriever over chunks in memory, searched as over the index a build would write of them.

        The evaluation's hybrid retrieval (`pipelines/evaluate/`): the
        same `search`/`rank` over the chunks a filter kept, with an exact
        inner-product index (the build's default `Flat`) and a BM25 index
        built by the build's own `build_bm25`.

        Args:
          chunks: `types.Chunk`s with embeddings (or `vectors`), in row order; at least one.
          model: The model that embedded them (it embeds `search`'s questions;
            None when only `rank` is called).
          config: Ranking settings.
          vectors: Normalized vectors to index, one row per chunk, instead of
            the chunks' own (e.g. pooled ones).

        Raises:
          ValueError: for no chunks (BM25 cannot index nothing).
        """
        import faiss

        if not len(chunks):
            raise ValueError('a Retriever over chunks needs at least one chunk')
        self = cls.__new__(cls)
        self.config = config
        self.model = model
        self.index = '<in memory>'
        if vectors is None:
            vectors = np.stack([c.embedding for c in chunks])
        self.embeddings = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dim = self.embeddings.shape[1]
        self.faiss = faiss.IndexFlatIP(self.dim)
        self.faiss.add(self.embeddings)
        self.chunk_ids = [c.chunk_id for c in chunks]
        self.doc_ids = [c.doc_id for c in chunks]
        self.char_starts = [c.char_start for c in chunks]
        self.char_ends = [c.char_end for c in chunks]
        self.texts = [c.text for c in chunks]
        self.salience = [c.salience for c in chunks]
        self.timestamps = [retrieval.document_timestamp(c.metadata) for c in chunks]
        self.bm25 = build_bm25(self.texts)
        self.bm25_tokenizer = BM25_TOKENIZER
        metadata = {}
        for c in chunks:
            metadata.setdefault(c.doc_id, c.metadata)
        self._metadata_filter = where_filter.MetadataFilter(
            self.doc_ids, [c.represents for c in chunks], metadata)
        return self

    def with_config(self, config: retrieval.RetrievalConfig) -> 'Retriever':
        """This Retriever ranking with other settings; the index in memory is shared, not copied."""
        other = copy.copy(self)
        other.config = config
        return other

    def metadata_filter(self) -> where_filter.MetadataFilter:
        """The index's metadata filter (own and represented documents' metadata)."""
        return self._metadata_filter

    def search(self, question: str, k: int = 5, where: Optional[dict] = None) -> SearchResult:
        """The k best chunks for a question, without near-duplicates.

        Args:
          question: The question.
          k: How many chunks at most.
          where: Metadata filter `{key: value or [values]}`: AND across keys,
            OR within one; a chunk matches through its own document or any
            document it represents (transforms/where.py). Applied inside the
            dense and BM25 searches.

        Raises:
          ValueError: if the question is empty or not text, k is not a whole
            number >= 1 or `where` is malformed.
        """
        retrieval.check_question(question)
        retrieval.check_k(k)
        started = time.perf_counter()
        query = embed_texts(self.model, [question])[0]
        return self.rank(question, query, k, where, {'embed': time.perf_counter() - started})

    def rank(self, question: str, query: np.ndarray, k: int = 5, where: Optional[dict] = None,
             seconds: Optional[dict] = None) -> SearchResult:
        """`search` for a question already embedded (by this Retriever's model), e.g. in a batch.

        Args:
          question: The question (BM25 reads it).
          query: Its normalized embedding.
          k, where: As for `search`.
          seconds: Wall times measured so far, added to the result's.

        Raises:
          ValueError: As `search`.
        """
        retrieval.check_question(question)
        retrieval.check_k(k)
        cfg = self.config
        seconds = dict(seconds or {})
        started = time.perf_counter()
        n = len(self.chunk_ids)
        dense_rows: Sequence[int] = []
        bm25 = np.zeros(n, np.float32)
        matched = None
        if where is not None and n:
            matched = self.metadata_filter().matches(where)
        elif where is not None:
            where_filter.normalize_where(where)  # still reject a malformed filter
        if n:
            allowed = None if matched is None else np.array(sorted(matched), np.int64)
            dense_rows = where_filter.dense_search(self.faiss, self.embeddings, query, cfg.candidates, allowed)
            tokens = bm25_tokenize([question], self.bm25_tokenizer, return_ids=False)[0]
            bm25 = retrieval.bm25_scores(self.bm25, tokens, n)
            if matched is not None:
                # The same allow-list as the dense search: other rows make no BM25 candidate.
                bm25 = np.where(self.metadata_filter().mask(matched), bm25, 0.0).astype(np.float32)
        seconds['search'] = time.perf_counter() - started

        started = time.perf_counter()
        fused = retrieval.fuse_candidates(
            query, dense_rows, bm25, self.embeddings, self.chunk_ids, self.salience, self.timestamps, cfg)
        hits = [self._hit(r, score, fused.cosines[r], fused.rankings,
                          None if matched is None else matched[r])
                for r, score in zip(fused.rows, fused.scores)]
        seconds['fusion'] = time.perf_counter() - started

        started = time.perf_counter()
        vectors = [self.embeddings[r] for r in fused.rows]
        # The whole list is walked so the log counts every duplicate, as klarRAG
        # logs it; only those ranked above the k-th hit are reported.
        selected, skipped = retrieval.dedup_ranked(vectors, cfg.dedup_threshold)
        LOG.info('Post-ranking deduplication: %d → %d chunks (removed %d cross-doc duplicates)',
                 len(hits), len(selected), len(skipped))
        selected = selected[:k]
        last = selected[-1] if selected else -1
        result = SearchResult(
            hits=[hits[i] for i in selected],
            skipped=[SkippedHit(hits[s.position], hits[s.duplicate_of].chunk_id, s.cosine)
                     for s in skipped if s.position < last],
            seconds=seconds,
        )
        seconds['dedup'] = time.perf_counter() - started
        return result

    def _hit(self, row: int, score: float, cosine: float, rankings: dict,
             matched_by: Optional[list] = None) -> Hit:
        chunk_id = self.chunk_ids[row]
        return Hit(
            chunk_id=chunk_id,
            doc_id=self.doc_ids[row],
            char_start=self.char_starts[row],
            char_end=self.char_ends[row],
            text=self.texts[row],
            score=score,
            cosine=cosine,
            ranks={s: rankings[s].get(chunk_id) for s in retrieval.SIGNALS},
            matched_by=matched_by,
        )
