"""Recall@10 of FAISS index types against the exact Flat index, on a built output.

Assembles each `--index_type` from the output's chunk parts exactly as the
build does (`transforms.output.indexes.assemble_faiss`: one part at a time, trained
types on the build's bounded sample), then searches it with query
embeddings: sentences of Python's documentation (`pydoc_data.topics`, a
seeded sample) embedded by the output's own model. Recall@10 is the share of
the exact top 10 (Flat) that the index returns in its top 10, averaged over
the queries, at each nprobe (IVF) or efSearch (HNSW) setting. Also prints
the index's size, its build time and the search time per query (one thread).

    python benchmarks/scale.py --sizes 160000 --runners direct --work /tmp/scale --keep
    python benchmarks/studies/index_recall.py --output /tmp/scale/out-direct-160000
"""

import argparse
import io
import json
import os
import random
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TYPES = 'HNSW32;IVF256,Flat;IVF1024,Flat;IVF1024,PQ32;IVF1024,PQ16'


def settings(index_type: str) -> list[tuple[str, int]]:
    """The search parameter values measured for an index type."""
    if 'HNSW' in index_type:
        return [('efSearch', v) for v in (16, 64, 128)]
    if 'IVF' in index_type:
        return [('nprobe', v) for v in (1, 8, 32)]
    return [('', 0)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--output', type=str, required=True, help='A built output directory (its chunks/ and manifest).')
    parser.add_argument('--types', type=str, default=DEFAULT_TYPES,
                        help='FAISS index_factory strings separated by ";".')
    parser.add_argument('--queries', type=int, default=500, help='Query sentences.')
    parser.add_argument('--train_size', type=int, default=65536, help='The build\'s --index_train_size.')
    parser.add_argument('--seed', type=int, default=0, help='Seed of the query sample.')
    args = parser.parse_args()

    sys.path.insert(0, REPO)
    import faiss
    import numpy as np

    from benchmarks.scale_corpus import source_sentences
    from transforms.features.embedding import embed_texts
    from transforms.features.models import load_embedding_model
    from transforms.output import indexes, tables

    with open(os.path.join(args.output, tables.MANIFEST_FILE)) as f:
        manifest = json.load(f)
    dim = manifest['model']['dim']
    model = load_embedding_model(manifest['config']['embedding']['model'])
    sentences = source_sentences()
    queries = embed_texts(model, random.Random(args.seed).sample(sentences, min(args.queries, len(sentences))))
    chunks_dir = os.path.join(args.output, tables.CHUNKS_DIR)
    faiss.omp_set_num_threads(1)

    def build(index_type):
        started = time.perf_counter()
        index = indexes.assemble_faiss(chunks_dir, dim, indexes.IndexConfig(index_type, args.train_size), io.BytesIO())
        return index, time.perf_counter() - started

    flat, flat_s = build('Flat')
    started = time.perf_counter()
    _, exact = flat.search(queries, 10)
    flat_ms = (time.perf_counter() - started) * 1000 / len(queries)
    print(f'{flat.ntotal} vectors ({dim}-d), {len(queries)} queries; model {manifest["config"]["embedding"]["model"]}')
    rows = [('Flat', '', 1.0, flat_ms, faiss.serialize_index(flat).nbytes / 2**20, flat_s)]
    for index_type in [t for t in args.types.split(';') if t.strip()]:
        index, seconds = build(index_type)
        size = faiss.serialize_index(index).nbytes / 2**20
        for name, value in settings(index_type):
            if name:
                faiss.ParameterSpace().set_index_parameter(index, name, value)
            started = time.perf_counter()
            _, found = index.search(queries, 10)
            ms = (time.perf_counter() - started) * 1000 / len(queries)
            recall = np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found.tolist(), exact.tolist())])
            rows.append((index_type, f'{name}={value}' if name else '', recall, ms, size, seconds))
        del index
    print('| index_type | search | recall@10 | ms/query | MiB | build s |')
    print('|---|---|---|---|---|---|')
    for index_type, search, recall, ms, size, seconds in rows:
        print(f'| `{index_type}` | {search} | {recall:.3f} | {ms:.2f} | {size:.0f} | {seconds:.1f} |')


if __name__ == '__main__':
    main()
