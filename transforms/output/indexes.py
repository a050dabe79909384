"""The FAISS and BM25 indexes, assembled from the written chunk parts one part at a time.

Row i of the chunks table (its parts read in shard order), position i of the
FAISS index, row i of index/ids.parquet and document i of the BM25 index are
the same chunk. The step that assembles the FAISS index holds the index and
one part (plus, for a trained index type, a training sample of at most
`train_size` vectors); the BM25 step holds one part's texts and the token ids
of every chunk, which bm25s needs all at once to index.
"""

from __future__ import annotations

import dataclasses
import heapq
import posixpath
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
                ids.write_table(pa.table({'chunk_id': part.column('chunk_id')}, schema=tables.IDS_SCHEMA))
    finally:
        faiss.omp_set_num_threads(threads)
    return index


def write_faiss(total_rows: int, output: str, dim: int, config: IndexConfig) -> int:
    """Writes index/index.faiss and index/ids.parquet from the chunk parts under `output`.

    Args:
      total_rows: Rows the chunk parts were written with (checked against the index).

    Returns:
      The number of vectors in the index.
    """
    import faiss

    publish.checkpoint('chunks_written')
    with storage.create(posixpath.join(output, tables.INDEX_DIR, tables.IDS_FILE)) as ids_file:
        index = assemble_faiss(posixpath.join(output, tables.CHUNKS_DIR), dim, config, ids_file)
    if index.ntotal != total_rows:
        raise RuntimeError(f'the FAISS index holds {index.ntotal} vectors, the chunk parts {total_rows} rows')
    with storage.create(posixpath.join(output, tables.INDEX_DIR, tables.INDEX_FILE)) as f:
        faiss.write_index(index, faiss.PyCallbackIOWriter(f.write))
    return index.ntotal


def write_bm25(total_rows: int, output: str) -> int:
    """Writes bm25/ from the chunk parts' texts (nothing when no chunk was kept); returns its documents."""
    from transforms.output.bm25 import bm25_files_of_batches

    if not total_rows:
        return 0
    texts = (part.column('text').to_pylist()
             for part in tables.iter_parts(posixpath.join(output, tables.CHUNKS_DIR), ['text']))
    for name, data in bm25_files_of_batches(texts).items():
        storage.write_bytes(posixpath.join(output, tables.BM25_DIR, name), data)
    return total_rows


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
