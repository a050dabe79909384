"""Where a sync reads the vectors of the rows it writes: the run's flat FAISS index by position, else chunks/.

Parquet decodes a column a row group at a time, and a part the build
wrote is one row group: reading 2% of a run's vectors from chunks/ decodes
them all (0.7 s of 100,000 384-d vectors here). A `Flat` index (the
default `--index_type`) holds the same float32 vectors, row i of chunks/
at position i, and FAISS maps it from disk: the rows written cost their own
bytes. Any other index, a remote run or an index that does not match the
run's rows and dimension is not used.
"""

from __future__ import annotations

import posixpath
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

from transforms import storage
from transforms.output import tables
from transforms.sync import rows


class RunVectors:
    """The vectors of a run's rows, by part and position within it."""

    def __init__(self, run: rows.Run):
        self._dim = run.dim
        self._starts = np.cumsum([0, *run.part_rows]).tolist()
        self._index = flat_index(run)

    @property
    def from_index(self) -> bool:
        return self._index is not None

    def read(self, part: int, path: str, positions: Sequence[int]) -> pa.Array:
        """The `embedding` of the rows at `positions` of part number `part` (at `path`)."""
        if self._index is None:
            return rows.read_vectors(path, positions)
        matrix = self._index.reconstruct_batch(np.asarray(positions, np.int64) + self._starts[part])
        return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1), pa.float32()), self._dim)


def flat_index(run: rows.Run) -> Optional[object]:
    """The run's FAISS index mapped from disk, if it is flat and holds the run's rows; else None."""
    path = posixpath.join(run.directory, tables.INDEX_DIR, tables.INDEX_FILE)
    if not run.part_rows or storage.is_remote(path):
        return None
    import faiss

    try:
        # Already of its own type (downcasting it again would leave a proxy of freed memory).
        index = faiss.read_index(path, faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
    except RuntimeError:  # missing or unreadable: chunks/ has the vectors
        return None
    if type(index) not in (faiss.IndexFlatIP, faiss.IndexFlatL2, faiss.IndexFlat):
        return None
    return index if (index.d, index.ntotal) == (run.dim, run.rows) else None
