"""The same build on five runners, side by side: in process, multi_processing, a Flink cluster, a Spark cluster,
and a Flink cluster across simulated hosts.

For each corpus the build runs, one after the other in this process's
children, on: the DirectRunner in process; the DirectRunner's
multi_processing mode with 2 workers; a real Flink 1.19 cluster (a
JobManager and two TaskManagers of one slot on 127.0.0.1, parallelism 2);
a real Spark 3.5 standalone cluster (one worker of 2 cores); `hosts`: the
same Flink cluster across simulated hosts that share nothing
(`engines/multihost.py`, root only: MinIO on its own host, the JobManager,
the job server, two TaskManager hosts, the launcher on its own), the corpus
uploaded to MinIO first (not timed), input, output and cache on s3://. The
clusters are started by `engines/` (`make engines` first) and their start
is timed apart. Each build's tables are compared byte for byte with the
in-process build's.

Prints per runner: wall seconds, CPU seconds and peak RSS of every process
(the launcher, the engine's daemons, its SDK workers; sampled from /proc),
and for Flink where the time goes: before the job (the launcher's model
load, the job server's start, translation and staging), the job itself,
its longest stages (Flink vertices, by their Beam step names), and after
it (manifest, report, publish). The target (issue 32): at 20k chunks,
Flink's wall within 1.3x the multi_processing DirectRunner's, cluster
start excluded.

Corpora: `chroma` (the five Chroma corpora, recursive 400/200, 1,358
chunks, the default cascade) and `synthetic` (benchmarks/scale_corpus.py's corpus,
20,000 chunks of 48 tokens, embedded with its one-layer model).

    python benchmarks/engines.py [--corpora chroma,synthetic] [--runners direct,multi,flink,spark,hosts]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import scale_corpus  # noqa: E402
from benchmarks.process_memory import TreeSampler  # noqa: E402
from engines import flink, multihost, spark  # noqa: E402
from tests.helpers import data_files, same_build  # noqa: E402

RUNNERS = ('direct', 'multi', 'flink', 'spark', 'hosts')
RUNNER_FLAGS = {'direct': [], 'multi': ['--direct_running_mode=multi_processing', '--direct_num_workers=2']}


def chroma_corpus(data: str, directory: str) -> tuple[str, list[str]]:
    """The five Chroma corpora (their .md files only) and the build flags of the study's 400/200 chunks."""
    corpus = os.path.join(directory, 'chroma')
    os.makedirs(corpus, exist_ok=True)
    for name in sorted(os.listdir(data)):
        if name.endswith('.md'):
            shutil.copy(os.path.join(data, name), corpus)
    return corpus, ['--chunk_size', '400', '--chunk_overlap', '200']


def synthetic_corpus(n: int, directory: str) -> tuple[str, list[str]]:
    """scale_corpus.py's corpus of `n` one-chunk paragraphs and its one-layer model."""
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    tokenizer = load_embedding_model(DEFAULT_EMBEDDING_MODEL).tokenizer
    corpus = os.path.join(directory, 'synthetic')
    scale_corpus.generate_corpus(corpus, n, tokenizer, 48, 11, 0.05, 0.05)
    model = scale_corpus.reduced_model(directory)
    return corpus, ['--chunk_size', '48', '--embedding_model', model]


def measure(argv: list[str], daemons: list[int], sample_s: float) -> dict:
    """Runs a build; its wall, and CPU seconds and peak RSS of it and of the daemons' trees."""
    started = time.perf_counter()
    epoch = time.time()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler([proc.pid, *daemons], sample_s)
    before = dict(sampler.cpu)
    sampler.start()
    log, _ = proc.communicate()
    wall = time.perf_counter() - started
    sampler.stop()
    if proc.returncode:
        raise RuntimeError(f'build failed ({proc.returncode}):\n{log[-4000:]}')
    processes = []
    for pid, kib in sorted(sampler.peaks.items()):
        cmd = sampler.cmdlines.get(pid, '')
        kind = ('launcher' if pid == proc.pid else 'sdk worker' if 'sdk_worker' in cmd else
                'job server' if 'job-server' in cmd else 'daemon' if pid in daemons else 'other')
        if kib > 16 * 1024:
            processes.append({'pid': pid, 'kind': kind, 'peak_mib': kib / 1024,
                              'cpu_s': sampler.cpu.get(pid, 0) - before.get(pid, 0)})
    return {'wall': wall, 'started': epoch, 'ended': time.time(), 'processes': processes,
            'cpu': sum(p['cpu_s'] for p in processes)}


def flink_timeline(rest: str, result: dict) -> dict:
    """Where the Flink build's wall went: before the job, the job (longest vertices), after it."""
    jobs = json.load(urllib.request.urlopen(f'{rest}/jobs/overview'))['jobs']
    job = json.load(urllib.request.urlopen(f"{rest}/jobs/{max(jobs, key=lambda j: j['start-time'])['jid']}"))
    start, end = job['start-time'] / 1000, job['end-time'] / 1000
    vertices = sorted(job['vertices'], key=lambda v: -v['duration'])
    return {
        'before_job': start - result['started'], 'job': end - start, 'after_job': result['ended'] - end,
        'vertices': len(job['vertices']),
        'longest': [(v['name'][:90], v['duration'] / 1000) for v in vertices[:4]],
    }


def on_launcher(cluster, argv: list[str]) -> subprocess.CompletedProcess:
    done = cluster.hosts.run('launcher', [sys.executable, *argv], env=cluster.store_env, cwd=str(REPO))
    if done.returncode:
        raise RuntimeError(f'{argv[:3]} failed on the launcher ({done.returncode}):\n{done.stderr[-4000:]}')
    return done


def hosts_build(name: str, corpus: str, flags: list[str], work: str, env: dict) -> tuple[dict, Path, str]:
    """The build on the Flink cluster across simulated hosts: its row's figures, where its run was copied, and
    the s3:// corpus it read."""
    cluster = multihost.FlinkHosts(Path(work) / f'{name}-hosts', env=env)
    started = time.perf_counter()
    with cluster:
        row = {'cluster_start': time.perf_counter() - started}
        cluster.make_bucket('bench')
        launcher = cluster.hosts['launcher']
        for value in flags:  # a model under /tmp (synthetic's): at the same path on every host's own /tmp
            if value.startswith('/tmp/') and os.path.isdir(value):
                for host in cluster.hosts.hosts.values():
                    shutil.copytree(value, host.outside(value))
        shutil.copytree(corpus, launcher.outside(f'/tmp/{name}-corpus'))
        remote = f's3://bench/{name}/corpus'
        on_launcher(cluster, ['-c', 'import sys; from tests.helpers import upload; upload(*sys.argv[1:])',
                              f'/tmp/{name}-corpus', remote])
        argv = ['-m', 'pipelines.cli', 'build', '--input', remote, '--output', f's3://bench/{name}/index',
                '--versioned', '--run_id', 'h1', *flags, *cluster.build_flags()]
        begun, epoch = time.perf_counter(), time.time()
        on_launcher(cluster, argv)
        row.update(wall=time.perf_counter() - begun, started=epoch, ended=time.time(), processes=[], cpu=0.0)
        on_launcher(cluster, ['-c', 'import sys; from tests.helpers import download; download(*sys.argv[1:])',
                              f's3://bench/{name}/index/runs/h1', '/tmp/h1'])
        out = Path(work) / f'{name}-hosts-run'
        shutil.copytree(launcher.outside('/tmp/h1'), out)
    return row, out, remote


def run_corpus(name: str, corpus: str, flags: list[str], runners: list[str], work: str, sample_s: float) -> list:
    rows, reference = [], None
    env = {'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1'}  # one torch thread per worker process: 2 on 2 cores
    for runner in runners:
        out = os.path.join(work, f'{name}-{runner}')
        argv = [sys.executable, '-m', 'pipelines.cli', 'build', '--input', corpus, '--output', out, *flags]
        row = {'corpus': name, 'runner': runner}
        remote = None
        if runner == 'hosts':
            result, hosts_out, remote = hosts_build(name, corpus, flags, work, env)
            row['cluster_start'] = result.pop('cluster_start')
            out = str(hosts_out)
        elif runner in RUNNER_FLAGS:
            if runner == 'multi':
                os.environ.update(env)
            result = measure(argv + RUNNER_FLAGS[runner], [], sample_s)
            for key in env:
                os.environ.pop(key, None)
        else:
            cls, directory = (flink.FlinkCluster, 'flink') if runner == 'flink' else (spark.SparkCluster, 'spark')
            cluster = cls(Path(work) / f'{name}-{directory}-cluster', env=env)
            started = time.perf_counter()
            with cluster:
                row['cluster_start'] = time.perf_counter() - started
                result = measure(argv + cluster.build_flags(), [p.pid for p in cluster.daemons.values()], sample_s)
                if runner == 'flink':
                    row['timeline'] = flink_timeline(cluster.rest, result)
        files = data_files(Path(out))
        reference = reference or files
        identical = same_build(files, reference, remote, corpus) if remote else files == reference
        row.update(result, identical=identical,
                   chunks=json.load(open(os.path.join(out, 'manifest.json')))['counts']['chunks_before_filters'])
        print(json.dumps({k: v for k, v in row.items() if k != 'processes'}), flush=True)
        rows.append(row)
    return rows


def report(rows: list[dict]) -> str:
    lines = ['| corpus | chunks | runner | cluster start s | wall s | CPU s | peak MiB: launcher / daemons / SDK workers '
             '| bytes = in-process |', '|---|---|---|---|---|---|---|---|']
    for r in rows:
        peaks = {k: [p['peak_mib'] for p in r['processes'] if p['kind'] == k]
                 for k in ('launcher', 'daemon', 'job server', 'sdk worker')}
        memory = ' / '.join(' + '.join(f'{m:.0f}' for m in peaks[k]) or '-'
                            for k in ('launcher', 'daemon', 'sdk worker'))
        if peaks['job server']:
            memory += f" (job server {peaks['job server'][0]:.0f})"
        cpu = f"{r['cpu']:.0f}" if r['processes'] else '-'  # the hosts' processes are not sampled
        lines.append(f"| {r['corpus']} | {r['chunks']} | {r['runner']} | {r.get('cluster_start', 0):.1f} | "
                     f"{r['wall']:.1f} | {cpu} | {memory} | {'yes' if r['identical'] else 'NO'} |")
    for r in rows:
        t = r.get('timeline')
        if t:
            lines.append(f"\n{r['corpus']} on Flink: {t['before_job']:.1f} s before the job (launcher, job server, "
                         f"translation, staging), {t['job']:.1f} s job ({t['vertices']} vertices), "
                         f"{t['after_job']:.1f} s after it; longest vertices: "
                         + '; '.join(f'{n} {s:.1f} s' for n, s in t['longest']))
    for corpus in dict.fromkeys(r['corpus'] for r in rows):
        by = {r['runner']: r for r in rows if r['corpus'] == corpus}
        if 'hosts' in by:
            against = ', '.join(f"{by['hosts']['wall'] / by[r]['wall']:.2f}x {r}'s" for r in ('flink', 'direct') if r in by)
            lines.append(f"\n{corpus}: Flink across hosts, wall {by['hosts']['wall']:.1f} s: {against or 'alone'} "
                         '(cluster start excluded; its input, output and cache on MinIO, the others\' on local disk)')
        if 'flink' in by and 'multi' in by:
            lines.append(f"\n{corpus}: Flink wall / multi_processing wall = {by['flink']['wall'] / by['multi']['wall']:.2f}x "
                         '(cluster start excluded; target at 20k chunks <= 1.3x)')
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--corpora', default='chroma,synthetic', help='Comma-separated: chroma, synthetic, sample (the bundled sample corpus: a quick look).')
    parser.add_argument('--runners', default=','.join(RUNNERS), help=f'Comma-separated of {", ".join(RUNNERS)}.')
    parser.add_argument('--data', default=str(REPO.parent / 'shared' / 'data' / 'chroma'),
                        help='The Chroma corpora folder.')
    parser.add_argument('--synthetic_chunks', type=int, default=20000, help='Size of the synthetic corpus.')
    parser.add_argument('--sample_s', type=float, default=0.5, help='Memory and CPU sampling period.')
    parser.add_argument('--json_out', help='Also write the rows as JSON here.')
    args = parser.parse_args()
    runners = args.runners.split(',')
    rows = []
    with tempfile.TemporaryDirectory(prefix='ragsieve-engines-') as work:
        for name in args.corpora.split(','):
            corpus, flags = (chroma_corpus(args.data, work) if name == 'chroma' else
                             (str(REPO / 'sample_corpus'), ['--chunk_size', '64']) if name == 'sample' else
                             synthetic_corpus(args.synthetic_chunks, work))
            rows += run_corpus(name, corpus, flags, runners, work, args.sample_s)
    print(report(rows))
    if args.json_out:
        with open(args.json_out, 'w') as f:
            json.dump(rows, f, indent=1)


if __name__ == '__main__':
    main()
