"""The FAISS and BM25 indexes, assembled from the written chunk parts one part at a time.

Row i of the chunks table (its parts read in shard order), position i of the
FAISS index, row i of index/ids.parquet and document i of the BM25 index are
the same chunk. The step that writes a Flat index holds one part (the file is
FAISS's header and the raw rows, appended as they are read); for any other
type it holds the index and one part (plus, for a trained index type, a
training sample of at most `train_size` vectors). The BM25 step reads the
parts twice (`bm25.write_bm25_files`): it holds the vocabulary, one part
and one merge block.
"""

from __future__ import annotations

import dataclasses
import heapq
import posixpath
import struct
import time
from typing import Iterable, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.metrics import Metrics

from transforms import storage
from transforms.hashing import stable_hash
from transforms.output import publish, tables

# Exact inner product, as before --index_type existed; rows are normalized, so scores are cosines.
DEFAULT_INDEX_TYPE = 'Flat'
DEFAULT_TRAIN_SIZE = 65536
_SAMPLE_PERSON = b'ragsieve-train'


@dataclasses.dataclass(frozen=True)
class IndexConfig:
    """Which FAISS index the build writes.

    Attributes:
      index_type: A FAISS `index_factory` string, metric inner product:
        `Flat` (exact, the default), `HNSW32`, `IVF1024,Flat`, `IVF1024,PQ32`, ...
      train_size: Vectors an index type that needs training (IVF, PQ) is
        trained on at most: those whose chunk_id hashes lowest (default 65536).
    """

    index_type: str = DEFAULT_INDEX_TYPE
    train_size: int = DEFAULT_TRAIN_SIZE

    def __post_init__(self):
        if not self.index_type or not self.index_type.strip():
            raise ValueError('index_type must be a FAISS index_factory string, e.g. "Flat" or "HNSW32"')
        if self.train_size < 1:
            raise ValueError(f'index_train_size must be >= 1, got {self.train_size}')

    def check(self, dim: int) -> None:
        """Builds an empty index of this type, so a bad string fails before the pipeline runs.

        How many vectors the corpus gives is known only once its chunks are
        written; a training sample too small for the type whatever the
        corpus is refused here.

        Raises:
          ValueError: If FAISS does not know the index type, or
            `train_size` is below the fewest vectors it trains on.
        """
        need = min_training_vectors(new_index(dim, self.index_type))
        if self.train_size < need:
            raise ValueError(
                f'--index_train_size {self.train_size} is below the {need} vectors a {self.index_type!r} '
                'index needs to train on')


def new_index(dim: int, index_type: str):
    """An empty FAISS index from its factory string, metric inner product.

    Raises:
      ValueError: If the string is not one `faiss.index_factory` understands.
    """
    import faiss

    try:
        return faiss.index_factory(dim, index_type, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise ValueError(f'--index_type {index_type!r} is not a FAISS index_factory string: {e}') from e


def min_training_vectors(index) -> int:
    """The fewest vectors FAISS trains an index on: one per IVF list, one per centroid of a product quantizer.

    FAISS's k-means refuses fewer points than centroids; the parts of a
    composite index (a transform, an ID map, HNSW's storage, a refinement's
    base) are searched for both.
    """
    import faiss

    need = 1
    pending = [index]
    while pending:
        part = faiss.downcast_index(pending.pop())
        nlist = getattr(part, 'nlist', None)
        if isinstance(nlist, int):
            need = max(need, nlist)
        pq = getattr(part, 'pq', None)
        if pq is not None:
            need = max(need, pq.ksub)
        for child in ('index', 'storage', 'base_index'):
            sub = getattr(part, child, None)
            if isinstance(sub, faiss.Index):
                pending.append(sub)
    return need


def sample_key(chunk_id: str) -> int:
    """A chunk's rank for the training sample: a keyed hash, so the sample is the same every run."""
    return stable_hash(chunk_id, person=_SAMPLE_PERSON)


def part_vectors(table: pa.Table, dim: int) -> np.ndarray:
    """The `embedding` column of a part as a `(rows, dim)` float32 matrix.

    Raises:
      ValueError: If a row has no embedding or one of another dimension.
    """
    column = table.column('embedding').combine_chunks() if table.num_rows else None
    if column is None:
        return np.zeros((0, dim), np.float32)
    if column.null_count:
        raise ValueError(f'{column.null_count} chunks have no embedding')
    values = column.flatten().to_numpy(zero_copy_only=False)
    if len(values) != table.num_rows * dim:
        raise ValueError(f'embeddings are not all {dim}-dimensional')
    return np.ascontiguousarray(values.reshape(-1, dim), dtype=np.float32)


def training_sample(chunks_dir: str, dim: int, size: int) -> np.ndarray:
    """The vectors of the `size` chunks whose chunk_id hashes lowest, in hash order.

    Two passes over the parts, one at a time: chunk ids, then the chosen vectors.
    """
    keyed = (
        (sample_key(chunk_id), shard, row)
        for shard, part in enumerate(tables.iter_parts(chunks_dir, ['chunk_id']))
        for row, chunk_id in enumerate(part.column('chunk_id').to_pylist())
    )
    chosen = heapq.nsmallest(size, keyed)
    position = {(shard, row): i for i, (_, shard, row) in enumerate(chosen)}
    wanted = {shard for _, shard, _ in chosen}
    sample = np.zeros((len(chosen), dim), np.float32)
    for shard, part in enumerate(tables.iter_parts(chunks_dir, ['embedding'])):
        if shard not in wanted:
            continue
        vectors = part_vectors(part, dim)
        for row in range(len(vectors)):
            i = position.get((shard, row))
            if i is not None:
                sample[i] = vectors[row]
    return sample


def assemble_faiss(chunks_dir: str, dim: int, config: IndexConfig, ids_file) -> object:
    """The FAISS index of a chunks table, read one part at a time; ids.parquet streamed to `ids_file`.

    FAISS runs on one thread here: a multi-threaded HNSW insert or k-means
    depends on thread timing, and the index must be the same bytes every run.

    Raises:
      ValueError: If a trained index type gets too few vectors to train on.
    """
    import faiss

    index = new_index(dim, config.index_type)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        if not index.is_trained:
            sample = training_sample(chunks_dir, dim, config.train_size)
            if len(sample):
                need = min_training_vectors(index)
                try:
                    if len(sample) < need:
                        raise RuntimeError(f'it needs at least {need}')
                    index.train(sample)
                except RuntimeError as e:
                    # FAISS's own messages are a C++ signature and a file: keep what it says last.
                    why = str(e).strip().splitlines()[-1].split('failed: ')[-1] if str(e).strip() else ''
                    raise ValueError(
                        f'cannot train a {config.index_type!r} index on the {len(sample)} vectors of this corpus '
                        f'({why}); choose a smaller index type for it, e.g. Flat or HNSW32') from e
        with pq.ParquetWriter(ids_file, tables.IDS_SCHEMA, compression='zstd') as ids:
            for part in tables.iter_parts(chunks_dir, ['chunk_id', 'embedding']):
                if not part.num_rows:
                    continue
                index.add(part_vectors(part, dim))
                ids.write_table(ids_table(part))
    finally:
        faiss.omp_set_num_threads(threads)
    return index


def ids_table(part: pa.Table) -> pa.Table:
    """The rows of index/ids.parquet for one chunk part: its chunk ids, in order."""
    return pa.table({'chunk_id': part.column('chunk_id')}, schema=tables.IDS_SCHEMA)


# What `faiss.write_index` writes for a Flat index of inner product before its rows
# (faiss/impl/index_write.cpp): fourcc, d, ntotal, two dummies, is_trained, metric_type,
# then the length of its float vector; native byte order, no padding.
_FLAT_HEADER = struct.Struct('=4siqqq?iQ')
_FLAT_FOURCC = b'IxFI'
_NTOTAL_AT = struct.calcsize('=4si')
_SIZE_AT = struct.calcsize('=4siqqq?i')


def is_flat(index) -> bool:
    """Whether an index is exact inner product over raw float32 rows: the type written part by part."""
    import faiss

    return type(index) in (faiss.IndexFlat, faiss.IndexFlatIP) and index.metric_type == faiss.METRIC_INNER_PRODUCT


def flat_header(dim: int, ntotal: int) -> bytes:
    """The bytes `faiss.write_index` writes before the rows of a `dim`-dimensional Flat index of `ntotal` vectors.

    FAISS serializes only an index it holds: this takes its bytes for an
    empty index and patches the two fields that count vectors. The layout
    is checked on those bytes, and the patched header on an index of two
    vectors that FAISS serializes itself, so that a FAISS writing another
    layout fails here instead of writing a file it cannot read.

    Raises:
      RuntimeError: If FAISS writes a Flat index in another layout.
    """
    import faiss

    empty = faiss.serialize_index(new_index(dim, DEFAULT_INDEX_TYPE)).tobytes()
    fields = _FLAT_HEADER.unpack(empty) if len(empty) == _FLAT_HEADER.size else None
    if fields is None or (fields[:3], fields[5:]) != ((_FLAT_FOURCC, dim, 0), (True, faiss.METRIC_INNER_PRODUCT, 0)):
        raise RuntimeError(f'faiss {faiss.__version__} writes an empty {dim}-dimensional Flat index as {empty!r}, '
                           f'not in the layout written part by part ({_FLAT_HEADER.format})')
    probe = np.arange(2 * dim, dtype=np.float32).reshape(2, dim)
    index = new_index(dim, DEFAULT_INDEX_TYPE)
    index.add(probe)
    if faiss.serialize_index(index).tobytes() != _patched(empty, 2, dim) + probe.tobytes():
        raise RuntimeError(f'faiss {faiss.__version__} writes a Flat index of 2 vectors other than as its header '
                           'and rows: the layout written part by part is not its own')
    return _patched(empty, ntotal, dim)


def _patched(empty: bytes, ntotal: int, dim: int) -> bytes:
    """An empty Flat index's header with its two counts of vectors set; every other byte as FAISS wrote it."""
    header = bytearray(empty)
    struct.pack_into('=q', header, _NTOTAL_AT, ntotal)
    struct.pack_into('=Q', header, _SIZE_AT, ntotal * dim)
    return bytes(header)


def part_rows(chunks_dir: str) -> list[tuple[str, int]]:
    """Each part of a table and its rows, in shard order, from the parts' footers (a few KB each)."""
    return [(path, tables.load_file(path, _footer_rows)) for path in tables.part_paths(chunks_dir)]


def _footer_rows(path: str) -> int:
    with storage.open_read(path) as f:
        return pq.ParquetFile(f).metadata.num_rows


def write_flat(parts: list[tuple[str, int]], dim: int, header: bytes, index_file, ids_file) -> int:
    """Writes the Flat index of the chunk parts to `index_file`, part by part, and ids.parquet to `ids_file`.

    The bytes are those `faiss.write_index` writes for the index of every
    part's vectors. Its header comes first and counts them, so the rows are
    counted beforehand, from the footers, and each part is held only while
    its rows are appended: `index_file` is written in order, as an object
    store's writer is.

    Args:
      parts: `part_rows` of the chunks table.
      dim: The embeddings' dimension.
      header: `flat_header(dim, rows of all parts)`.

    Returns:
      The number of vectors written.

    Raises:
      RuntimeError: If a part holds other rows than its footer said.
    """
    index_file.write(header)
    with pq.ParquetWriter(ids_file, tables.IDS_SCHEMA, compression='zstd') as ids:
        for path, rows in parts:
            part = tables.read_part(path, ['chunk_id', 'embedding'])
            if part.num_rows != rows:
                raise RuntimeError(f'{path} holds {part.num_rows} rows, its footer {rows}: it changed while read')
            if not rows:
                continue
            index_file.write(memoryview(part_vectors(part, dim)).cast('B'))
            ids.write_table(ids_table(part))
    return sum(rows for _, rows in parts)


def write_faiss(total_rows: int, output: str, dim: int, config: IndexConfig) -> int:
    """Writes index/index.faiss and index/ids.parquet from the chunk parts under `output`.

    A Flat index is written part by part (`write_flat`); any other type is
    assembled in memory (`assemble_faiss`), then written by FAISS.

    Args:
      total_rows: Rows the chunk parts were written with (checked against the index).

    Returns:
      The number of vectors in the index.
    """
    import faiss

    publish.checkpoint('chunks_written')
    chunks_dir = posixpath.join(output, tables.CHUNKS_DIR)
    ids_path = posixpath.join(output, tables.INDEX_DIR, tables.IDS_FILE)
    index_path = posixpath.join(output, tables.INDEX_DIR, tables.INDEX_FILE)
    if is_flat(new_index(dim, config.index_type)):
        # Written part by part: a Flat index is its rows, as large as the corpus's embeddings.
        parts = part_rows(chunks_dir)
        _check_count(sum(rows for _, rows in parts), total_rows)
        header = flat_header(dim, total_rows)  # before any file is begun: it fails on a FAISS of another layout
        with storage.create(ids_path) as ids_file, storage.create(index_path) as index_file:
            return write_flat(parts, dim, header, index_file, ids_file)
    with storage.create(ids_path) as ids_file:
        index = assemble_faiss(chunks_dir, dim, config, ids_file)
    _check_count(index.ntotal, total_rows)
    with storage.create(index_path) as f:
        faiss.write_index(index, faiss.PyCallbackIOWriter(f.write))
    return index.ntotal


def _check_count(vectors: int, total_rows: int) -> None:
    if vectors != total_rows:
        raise RuntimeError(f'the FAISS index holds {vectors} vectors, the chunk parts {total_rows} rows')


def write_bm25(total_rows: int, output: str) -> int:
    """Writes bm25/ from the chunk parts' texts (nothing when no chunk was kept); returns its documents.

    The parts are read twice, one at a time, and each file is streamed to
    storage: the step holds the vocabulary, one part and one merge block.
    """
    from transforms.output.bm25 import write_bm25_files

    if not total_rows:
        return 0
    chunks_dir = posixpath.join(output, tables.CHUNKS_DIR)

    def texts():
        return (part.column('text').to_pylist() for part in tables.iter_parts(chunks_dir, ['text']))

    def create(name):
        return storage.create(posixpath.join(output, tables.BM25_DIR, name))

    documents = write_bm25_files(texts, create)
    if documents != total_rows:
        raise RuntimeError(f'the BM25 index holds {documents} documents, the chunk parts {total_rows} rows')
    return documents


class _TimedFn(beam.DoFn):
    """Runs one assembling function on the total row count, timing it in `<namespace>.msecs`."""

    def __init__(self, namespace: str, fn, *args):
        self._fn = fn
        self._args = args
        self._msecs = Metrics.counter(namespace, 'msecs')

    def process(self, total_rows: int) -> Iterable[int]:
        started = time.perf_counter()
        yield self._fn(total_rows, *self._args)
        self._msecs.inc(int((time.perf_counter() - started) * 1000))


class BuildIndexes(beam.PTransform):
    """PCollection[int] (rows per written chunk part) -> {'faiss', 'bm25'}: PCollection[int] of one count each.

    The part counts are summed first, so both steps start once every chunk
    part is written; they then read the parts back, one at a time, in two
    independent steps that may run on two workers.
    """

    def __init__(self, output: str, dim: int, config: Optional[IndexConfig] = None):
        super().__init__()
        self._output = output
        self._dim = dim
        self._config = config or IndexConfig()

    def expand(self, part_rows):
        total = part_rows | 'CountChunkRows' >> beam.CombineGlobally(sum)
        return {
            'faiss': total | 'BuildFaissIndex' >> beam.ParDo(
                _TimedFn('index', write_faiss, self._output, self._dim, self._config)),
            'bm25': total | 'BuildBm25' >> beam.ParDo(_TimedFn('bm25', write_bm25, self._output)),
        }
