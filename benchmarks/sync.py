"""Sync throughput per store against the store's own bulk load, and what a nightly sync costs.

Writes a synthetic run of --rows chunks (random unit 384-d vectors, ~600
characters of text each, in the chunks/ layout of a real build, with its
Flat FAISS index) and a second
run in which --changed of the rows have new text and vectors. For each store
it measures, in one process: the floor (the store's own bulk-load path into
an empty table: LanceDB `create_table` from Arrow, PostgreSQL one binary
COPY, Milvus one `insert`), a first sync of run 1 into an empty table, and the nightly sync of run
2 over it. Prints rows/s and the ratios first/floor and nightly/first
(target: nightly at most 0.10 of first), and checks the nightly sync wrote
only the changed rows.

  python benchmarks/sync.py --rows 100000 --stores lancedb,pgvector
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

DIM = 384
WORDS = ('river', 'stone', 'lamp', 'orbit', 'garden', 'copper', 'violin', 'harbor', 'pepper', 'glacier')


def make_run(directory: str, run_id: str, n: int, changed: set, seed: int = 0, num_shards: int = 16) -> None:
    """A run directory with chunks/ and a manifest, as a build writes them."""
    from transforms.output import indexes, tables, writers

    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    words = rng.integers(0, len(WORDS), size=(n, 90))
    fresh = np.random.default_rng(seed + 1)
    rows = []
    for i in range(n):
        text = ' '.join(WORDS[w] for w in words[i])
        vector = vectors[i]
        if i in changed:
            text += ' (revised)'
            vector = fresh.normal(size=DIM).astype(np.float32)
            vector /= np.linalg.norm(vector)
        doc = f'doc-{i // 10:06d}'
        rows.append({
            'chunk_id': f'{doc}#{i % 10}', 'doc_id': doc, 'chunk_index': i % 10, 'text': text,
            'char_start': 0, 'char_end': len(text), 'n_tokens': 90, 'content_hash': '', 'embedding': vector.tolist(),
            'metadata': json.dumps({'source': doc}), 'entities': None, 'topic': None, 'salience': None,
            'kind': 'chunk', 'delta_of': None, 'represents': [],
        })
    os.makedirs(directory, exist_ok=True)
    writers.write_parts(rows, tables.CHUNKS_TABLE, os.path.join(directory, tables.CHUNKS_DIR), num_shards)
    indexes.write_faiss(n, directory, DIM, indexes.IndexConfig())  # the build's default Flat index
    manifest = {'run_id': run_id, 'counts': {'chunks': n, 'deltas': 0}, 'model': {'dim': DIM}}
    with open(os.path.join(directory, tables.MANIFEST_FILE), 'w') as f:
        json.dump(manifest, f)


def floor_seconds(store: str, uri: str, run: str) -> float:
    """The store's own bulk load of the run's rows into an empty table."""
    import pyarrow as pa

    from transforms.output import tables
    from transforms.sync import rows

    meta = rows.Run.of(run)
    dim = meta.dim
    table = pa.concat_tables([rows.run_rows(tables.read_part(p, rows.CONTENT_COLUMNS), meta) for p in meta.part_paths()])
    started = time.perf_counter()
    if store == 'lancedb':
        import lancedb

        lancedb.connect(uri.split('://', 1)[1].split('?')[0]).create_table('floor', data=table)
    elif store == 'milvus':
        from transforms.sync.milvus_store import MilvusStore

        floor = MilvusStore(uri + '?table=floor')
        floor.prepare(dim, create=True)
        records = table.drop_columns(['embedding']).to_pylist()
        for record, vector in zip(records, rows.vector_matrix(table.column('embedding'))):
            record['embedding'] = vector.tolist()
        for start in range(0, len(records), 10_000):  # the client's own bulk path: inserts, no upsert
            floor._client.insert('floor', records[start:start + 10_000])
        floor.close()
    else:
        import psycopg
        from pgvector.psycopg import register_vector

        with psycopg.connect(uri.split('?')[0]) as conn:
            conn.execute('CREATE EXTENSION IF NOT EXISTS vector')
            register_vector(conn)
            conn.execute(f'CREATE TABLE floor (chunk_id text PRIMARY KEY, doc_id text, text text, '
                         f'embedding vector({dim}), metadata text, kind text, salience real, run_id text, row_hash text)')
            columns = [table.column(c).to_pylist() for c in rows.COLUMNS if c != 'embedding']
            vectors = rows.vector_matrix(table.column('embedding'))
            names = [c for c in rows.COLUMNS if c != 'embedding'] + ['embedding']
            with conn.cursor().copy(f'COPY floor ({", ".join(names)}) FROM STDIN WITH (FORMAT BINARY)') as copy:
                copy.set_types(['text', 'text', 'text', 'text', 'text', 'float4', 'text', 'text', 'vector'])
                for i in range(table.num_rows):
                    copy.write_row([c[i] for c in columns] + [vectors[i]])
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--rows', type=int, default=100_000, help='Chunks in the run.')
    parser.add_argument('--changed', type=float, default=0.02, help='Share of rows the nightly run changes.')
    parser.add_argument('--stores', type=str, default='lancedb,pgvector', help='Stores to measure.')
    parser.add_argument('--batch_rows', type=int, default=1000, help='The sync\'s --batch_rows.')
    args = parser.parse_args()

    from pipelines import sync as sync_job

    tmp = tempfile.mkdtemp(prefix='ragsieve-sync-bench-')
    rng = np.random.default_rng(7)
    changed = set(rng.choice(args.rows, size=int(args.rows * args.changed), replace=False).tolist())
    started = time.perf_counter()
    make_run(os.path.join(tmp, 'r1'), 'r1', args.rows, set())
    make_run(os.path.join(tmp, 'r2'), 'r2', args.rows, changed)
    print(f'{args.rows} rows, {len(changed)} changed in r2; runs written in {time.perf_counter() - started:.0f} s')
    print('| store | floor s | first sync s | first rows/s | first/floor | nightly s | nightly rows written | '
          'nightly/first |')
    print('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    postgres = None
    try:
        for store in args.stores.split(','):
            if store == 'lancedb':
                uri = f'lancedb://{tmp}/lance'
            elif store == 'milvus':
                uri = f'milvus://{tmp}/milvus.db'
            else:
                from tests.helpers import throwaway_postgres

                postgres = throwaway_postgres()
                uri = postgres.__enter__()
            floor = floor_seconds(store, uri, os.path.join(tmp, 'r1'))
            first = sync_job.sync(os.path.join(tmp, 'r1'), uri, batch_rows=args.batch_rows)
            nightly = sync_job.sync(os.path.join(tmp, 'r2'), uri, batch_rows=args.batch_rows)
            assert nightly.upserted == len(changed) and nightly.deleted == 0, nightly
            print(f'| {store} | {floor:.1f} | {first.seconds:.1f} | {args.rows / first.seconds:,.0f} | '
                  f'{first.seconds / floor:.2f} | {nightly.seconds:.1f} | {nightly.upserted} | '
                  f'{nightly.seconds / first.seconds:.3f} |', flush=True)
            if postgres is not None:
                postgres.__exit__(None, None, None)
                postgres = None
    finally:
        if postgres is not None:
            postgres.__exit__(None, None, None)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
