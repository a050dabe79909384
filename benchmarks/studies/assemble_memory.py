"""Peak memory of the index-assembling steps, alone, on built outputs of growing size.

The build's FAISS and BM25 steps (`transforms.output.indexes.write_faiss`,
`write_bm25`) are run on an existing output's chunk parts, each in a fresh
process, so their peak RSS (VmHWM) is theirs alone and not the runner's: the
DirectRunner's workers also buffer the PCollections they are handed, which
hides a step's own memory in the benchmark of the whole build
(`benchmarks/scale.py`). Prints each step's seconds, the peak RSS after imports, at the end, the
difference, and the index's size: the FAISS step should grow by about the
index's bytes and one part (a Flat index: one part), the BM25 step by its
vocabulary, one part and one merge block. Also the launcher's own work
after the pipeline: the manifest's tallies, diff.json (the build against
itself: both sides read, a bucket of ids held at a time), the gates and
report.html.

    python benchmarks/scale.py --sizes 20000,160000 --runners direct --work /tmp/scale --keep
    python benchmarks/studies/assemble_memory.py /tmp/scale/out-direct-20000 /tmp/scale/out-direct-160000
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEP = r'''
import json, resource, sys, time
sys.path.insert(0, {repo!r})
import faiss, bm25s, numpy, pyarrow.parquet
from transforms.output import changes, gates, indexes, tables
from pipelines.build_index import manifest
from transforms.report import page

def peak_mib():
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) for l in f if l.startswith('VmHWM')) / 1024

output, dim, step, index_type = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = sum(p.num_rows for p in tables.iter_parts(output + '/chunks', ['chunk_id']))
base = peak_mib()
started = time.perf_counter()
if step == 'faiss':
    indexes.write_faiss(rows, output, dim, indexes.IndexConfig(index_type))
elif step == 'bm25':
    indexes.write_bm25(rows, output)
else:
    # What the launcher does after the pipeline: the manifest's tallies, the diff, the gates, the report.
    manifest.kept_tallies(output + '/chunks')
    tables.read_table(output + '/dropped', ['chunk_id', 'doc_id', 'reason', 'duplicate_of']).to_pylist()
    changes.diff_builds(output, output)
    built = json.load(open(output + '/manifest.json'))
    gates.evaluate(gates.GateConfig(), built, built)
    page.write_report(output)
print(json.dumps({{'rows': rows, 'base': base, 'peak': peak_mib(), 'seconds': time.perf_counter() - started}}))
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('outputs', nargs='+', help='Built output directories.')
    parser.add_argument('--index_type', type=str, default='Flat', help='FAISS index_factory string.')
    parser.add_argument('--steps', type=str, default='faiss,bm25,launcher', help='Comma-separated steps to run.')
    args = parser.parse_args()
    print('| output | kept chunks | parts | step | seconds | MiB after imports | peak MiB | growth MiB | index MiB |')
    print('|---|---|---|---|---|---|---|---|---|')
    for output in args.outputs:
        with open(os.path.join(output, 'manifest.json')) as f:
            dim = json.load(f)['model']['dim']
        parts = len(os.listdir(os.path.join(output, 'chunks')))
        with tempfile.TemporaryDirectory() as tmp:
            # A copy of the tables: the output itself is left as it is.
            for table in ('chunks', 'dropped', 'documents', 'rejected'):
                shutil.copytree(os.path.join(output, table), os.path.join(tmp, table))
            for name in ('manifest.json', 'diff.json'):
                shutil.copy(os.path.join(output, name), tmp)
            for step in args.steps.split(','):
                code = STEP.format(repo=REPO)
                out = subprocess.run([sys.executable, '-c', code, tmp, str(dim), step, args.index_type],
                                     check=True, capture_output=True, text=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                size = os.path.getsize(os.path.join(tmp, 'index', 'index.faiss')) / 2**20 if step == 'faiss' else 0
                print(f"| {os.path.basename(output)} | {r['rows']} | {parts} | {step} | {r['seconds']:.1f} | {r['base']:.0f} | "
                      f"{r['peak']:.0f} | {r['peak'] - r['base']:.0f} | {size:.0f} |", flush=True)


if __name__ == '__main__':
    main()
