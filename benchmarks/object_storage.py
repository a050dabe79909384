"""Builds on object storage against the same builds on local disk: wall ratio, 0 embedded, a fresh build's bytes.

Starts MinIO (S3) and fake-gcs-server (GCS) on 127.0.0.1 (engines/objectstores.py; `make objectstores`
builds them), copies the Chroma corpora into each store and into a local folder, then, for local disk, s3://
and gs:// in turn: a versioned build (its input, output and feature cache all on that store) and an
unchanged nightly rebuild. Every build runs in its own process, as a user runs `ragsieve build`, so
each pays its imports and model load alike. Prints each wall time, the ratios store / local (target:
build on MinIO <= 1.2x), the chunks each rebuild embedded (target: 0), and whether each rebuild's data files
equal the local build's (documents/ and rejected/ compared but for the `source` column, which names the
store the files were read from).

    .venv/bin/python benchmarks/object_storage.py [--data ../shared/data/chroma] [--stores s3 gs]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engines import objectstores  # noqa: E402
from tests.helpers import BUCKET, data_files, download, same_build, upload  # noqa: E402
from transforms import storage  # noqa: E402


def build(corpus: str, root: str, run_id: str, env: dict, flags: list[str]) -> tuple[float, dict]:
    """One `ragsieve build` in its own process; returns its wall time and the run's manifest."""
    command = [sys.executable, '-m', 'pipelines.cli', 'build', '--input', corpus, '--output', root, '--versioned',
               '--run_id', run_id, '--progress', 'none', *flags]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f'{" ".join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}')
    return wall, json.loads(storage.read_bytes(f'{root}/runs/{run_id}/manifest.json'))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--data', default=str(REPO.parent / 'shared' / 'data' / 'chroma'),
                        help='The Chroma corpora (*.md are read).')
    parser.add_argument('--stores', nargs='+', choices=['s3', 'gs'], default=['s3', 'gs'])
    parser.add_argument('--flags', default='', help='More build flags, e.g. "--chunker recursive --chunk_size 400".')
    args = parser.parse_args()
    flags = args.flags.split()
    work = Path(tempfile.mkdtemp(prefix='ragsieve-objectstores-'))
    corpus = work / 'corpus'
    corpus.mkdir()
    for path in sorted(Path(args.data).glob('*.md')):
        (corpus / path.name).write_bytes(path.read_bytes())
    servers = {'s3': objectstores.MinioServer(work / 'minio'), 'gs': objectstores.FakeGcsServer(work / 'gcs')}
    servers = {k: servers[k] for k in args.stores}
    rows = []
    try:
        for server in servers.values():
            server.start()
            server.make_bucket(BUCKET)
        local_wall, local = build(str(corpus), str(work / 'local'), 'b1', {}, flags)
        rebuild_wall, rebuilt = build(str(corpus), str(work / 'local'), 'b2', {}, flags)
        local_files = data_files(work / 'local' / 'runs' / 'b1')
        rows.append(('local', local_wall, rebuild_wall, rebuilt['counts']['chunks_embedded'],
                     data_files(work / 'local' / 'runs' / 'b2') == local_files))
        for kind, server in servers.items():
            os.environ.update(server.env)
            storage.configure()
            remote_corpus = upload(corpus, f'{kind}://{BUCKET}/corpus')
            root = f'{kind}://{BUCKET}/index'
            wall, _ = build(remote_corpus, root, 'b1', server.env, flags)
            again, rebuilt = build(remote_corpus, root, 'b2', server.env, flags)
            files = data_files(download(f'{root}/runs/b2', work / f'{kind}-b2'))
            rows.append((kind, wall, again, rebuilt['counts']['chunks_embedded'],
                         same_build(files, local_files, remote_corpus, corpus)))
    finally:
        for server in servers.values():
            server.stop()
    print(f'{local["counts"]["documents_indexed"]} documents, {local["counts"]["chunks_before_filters"]} chunks '
          f'({" ".join(flags) or "default flags"})')
    print(f'{"where":6} {"build s":>8} {"/ local":>8} {"rebuild s":>10} {"/ local":>8} {"embedded":>9} {"= local bytes":>14}')
    for kind, wall, again, embedded, equal in rows:
        print(f'{kind:6} {wall:8.1f} {wall / local_wall:8.2f} {again:10.1f} {again / rebuild_wall:8.2f} '
              f'{embedded:9d} {str(equal):>14}')


if __name__ == '__main__':
    main()
