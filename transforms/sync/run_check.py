"""The run a sync reads, checked before the store is touched: its parts' footers and ids against its manifest.

A part rewritten shorter, one missing, rows without an id or with one twice,
vectors of another size: each is one line, and the store keeps what it had
(a sync deletes what the run lacks, so a shortened run would delete rows).
Costs the footers and the chunk_id column of each part, not its rows.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms import storage
from transforms.output import tables
from transforms.sync import rows
from transforms.sync.store import shown_id

# Columns a part must have for a sync.
NEEDED = rows.FIELDS + ('embedding',)


def checked_run(directory: str) -> rows.Run:
    """The run at `directory`, with the rows of each part, once its parts agree with its manifest.

    Raises:
      ValueError: One line naming the run and what is wrong with it.
    """
    run = rows.Run.of(directory)
    try:
        counts, ids = [], []
        for path in run.part_paths():
            count, part_ids = _check_part(path, run.dim)
            counts.append(count)
            ids.append((path, part_ids))
        _check_ids(ids)
    except ValueError as e:
        raise ValueError(_refused(run, str(e))) from None
    if sum(counts) != run.rows:
        raise ValueError(_refused(run, f'its {len(counts)} parts hold {sum(counts)} rows, its manifest counts '
                                       f'{run.rows} (chunks/ changed after the build)'))
    return dataclasses.replace(run, part_rows=tuple(counts))


def _refused(run: rows.Run, problem: str) -> str:
    return f'run {run.run_id} ({run.directory}) cannot be synced: {problem}; the store was not touched'


def _check_part(path: str, dim: int) -> tuple[int, pa.ChunkedArray]:
    """The rows of one part, from its footer, and its ids, once its columns and vector values are right."""
    metadata = tables.load_file(path, _footer)
    names = set(metadata.schema.to_arrow_schema().names)
    missing = [c for c in NEEDED if c not in names]
    if missing:
        raise ValueError(f'{path} has no column(s) {missing}')
    values = sum(metadata.row_group(g).column(i).num_values for g in range(metadata.num_row_groups)
                 for i in range(metadata.num_columns)
                 if metadata.row_group(g).column(i).path_in_schema.startswith('embedding.'))
    if values != metadata.num_rows * dim:
        raise ValueError(f'{path} holds {values} vector values for {metadata.num_rows} rows, not {dim} each')
    ids = tables.read_part(path, ['chunk_id']).column('chunk_id')
    if len(ids) != metadata.num_rows:
        raise ValueError(f'{path} holds {len(ids)} rows, its footer {metadata.num_rows}')
    return metadata.num_rows, ids


def _check_ids(parts: list[tuple[str, pa.ChunkedArray]]) -> None:
    """Refuses a row without a chunk_id, or an id twice: counted by Arrow, named only when found."""
    for path, ids in parts:
        if ids.null_count:
            raise ValueError(f'{path} holds a row without a chunk_id')
    every = pa.chunked_array([chunk for _, ids in parts for chunk in ids.chunks], pa.string())
    if pc.count_distinct(every).as_py() == len(every):
        return
    seen: set = set()
    for path, ids in parts:
        for chunk_id in ids.to_pylist():
            if chunk_id in seen:
                raise ValueError(f'{path} holds chunk_id {shown_id(chunk_id)!r} twice')
            seen.add(chunk_id)


def _footer(path: str) -> pq.FileMetaData:
    with storage.open_read(path) as f:
        return pq.ParquetFile(f).metadata

