"""The build at growing corpus sizes and on several runners: time, CPU, memory per process kind, disk spilled.

For each runner and size, one build job of benchmarks/scale_corpus.py's
corpus (one-chunk paragraphs of 48 tokens, planted exact and near copies;
the default cascade filter) runs in a process of its own:

- `direct`: the DirectRunner in process, the default path;
- `multi`: the DirectRunner's multi_processing mode, 2 workers;
- `flink`: `--runner FlinkRunner`, the embedded Flink that spills to disk (docs/scale.md);
- `hosts`: a Flink cluster across simulated hosts that share nothing (`engines/multihost.py`, root only):
  the corpus on MinIO's host, input, output and cache on s3://, the build launched from its own host.

The DirectRunner runs up to where it fits: a size whose estimate
(`pipelines/build_index/direct_memory.py`, from the input's size) the
machine cannot hold is skipped, saying so. So that the pipeline, not the
model, is measured, chunks are embedded by a reduced model derived from
the packaged all-MiniLM-L6-v2 (its first transformer layer, max_seq_length
64); torch and FAISS get one thread per worker process (--threads), so two
workers fit two cores, and their own default in process (`direct`).

Prints, per build: wall, CPU seconds of all its processes, peak RSS per
process kind (launcher, job server, SDK workers, engine daemons, store;
sampled every --sample_s from /proc), the peak size of its spill directory
($TMPDIR, or the TaskManagers' temporary directories on the hosts), the
busy seconds of each stage (from the manifest, summed over workers), the
planted copies each filter found, and whether its tables are the
DirectRunner's of the same size. Then the targets: CPU seconds from the
second size to the last at most 1.15x linear; every process kind's peak at
the last size at most 1.25x its peak at the second; the engine's wall at
the last size within 1.3x the DirectRunner's slope extrapolated.

With --rebuild FRACTION, at the last size on `flink`: that
build is made with --versioned and --cache, then FRACTION of its documents
change (`scale_corpus.change_corpus`) and the next night's build runs on
the same root and cache, then a fresh build of the changed corpus without
cache; the rebuild must embed only the changed chunks and equal the fresh
build; both walls are printed.

    python benchmarks/scale.py [--sizes 10000,100000,300000,1000000] [--runners direct,flink,hosts]
        [--rebuild 0.01] [--work DIR] [--json_out FILE] [-- EXTRA BUILD FLAGS]
    python benchmarks/scale.py --report small.json 1m.json  # one table of runs made apart
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import scale_corpus  # noqa: E402
from benchmarks.process_memory import TreeSampler  # noqa: E402

DEFAULT_SIZES = '10000,100000,300000,1000000'
RUNNERS = ('direct', 'multi', 'flink', 'hosts')
RUNNER_FLAGS = {'direct': [], 'multi': ['--direct_running_mode=multi_processing', '--direct_num_workers=2'],
                'flink': ['--runner', 'FlinkRunner']}
# Process kinds, by what their command line holds (first match).
# Flink's daemons first: their class path names the job server's jars.
KINDS = (('sdk worker', ('sdk_worker', 'sdk-worker')), ('jobmanager', ('StandaloneSessionClusterEntrypoint',)),
         ('taskmanager', ('TaskManagerRunner',)), ('job server', ('job-server',)), ('store', ('minio',)))
CHUNK_SIZE = 48


def process_kind(cmdline: str, launcher: bool) -> str:
    if launcher:
        return 'launcher'
    for kind, marks in KINDS:
        if any(mark in cmdline for mark in marks):
            return kind
    return 'other'


def directory_bytes(path: str) -> int:
    """Bytes of the files under `path` (blocks on disk), 0 where it is gone."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


class DiskSampler(threading.Thread):
    """The peak of the bytes under some directories, sampled every `every` seconds."""

    def __init__(self, paths, every: float = 5.0):
        super().__init__(daemon=True)
        self.paths, self.every, self.peak = list(paths), every, 0
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            self.peak = max(self.peak, sum(directory_bytes(p) for p in self.paths))
            self._done.wait(self.every)

    def stop(self):
        self._done.set()
        self.join()


def summarize(sampler: TreeSampler, launcher_pid: int) -> dict:
    """Peak MiB and CPU seconds per process kind (peaks: the largest process of the kind; CPU: their sum)."""
    kinds: dict = {}
    for pid, kib in sampler.peaks.items():
        if kib < 16 * 1024:  # shells, `ip`, short helpers
            continue
        kind = process_kind(sampler.cmdlines.get(pid, ''), pid == launcher_pid)
        entry = kinds.setdefault(kind, {'count': 0, 'peak_mib': 0.0, 'cpu_s': 0.0})
        entry['count'] += 1
        entry['peak_mib'] = max(entry['peak_mib'], kib / 1024)
        entry['cpu_s'] += sampler.cpu.get(pid, 0.0)
    return kinds


def run_measured(argv: list, env: dict, spill: list, sample_s: float, roots=None) -> dict:
    """Runs a command; its wall, CPU, process kinds and disk spilled. `roots`: more processes to sample (a callable)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler((lambda: [proc.pid, *roots()]) if roots else proc.pid, sample_s)
    disk = DiskSampler(spill)
    sampler.start()
    disk.start()
    log, _ = proc.communicate()
    wall = time.perf_counter() - started
    sampler.stop()
    disk.stop()
    if proc.returncode:
        raise RuntimeError(f'{argv[:4]} failed ({proc.returncode}):\n{log[-4000:]}')
    kinds = summarize(sampler, proc.pid)
    return {'wall': wall, 'cpu': sum(k['cpu_s'] for k in kinds.values()), 'kinds': kinds,
            'spill_mib': disk.peak / 2**20, 'log': log}


def build_argv(corpus: str, out: str, model: str, flags: list) -> list:
    return [sys.executable, '-m', 'pipelines.cli', 'build', '--input', corpus, '--output', out,
            '--embedding_model', model, '--chunk_size', str(CHUNK_SIZE), '--progress', 'log', *flags]


def local_build(runner: str, corpus: str, out: str, model: str, flags: list, work: str, sample_s: float,
                threads: int) -> dict:
    """A build on this machine's runner; its spill directory is a $TMPDIR of its own."""
    tmp = os.path.join(work, f'tmp-{os.path.basename(out)}')
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, TMPDIR=tmp, PYTHONPATH=str(REPO))
    if threads and runner != 'direct':  # in process, torch's own threads use the cores
        # Workers inherit it: two workers of N torch threads each on a small, shared machine
        # would measure the oversubscription, not the pipeline.
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    try:
        return run_measured(build_argv(corpus, out, model, RUNNER_FLAGS[runner] + flags), env, [tmp], sample_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def hosts_build(corpus: str, out: str, model: str, flags: list, work: str, sample_s: float, threads: int) -> dict:
    """A build on the Flink cluster across simulated hosts, every host's processes sampled; its run copied to `out`."""
    from engines import multihost
    from pipelines.build_index import local_engine

    env = {'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads)} if threads else {}
    cluster = multihost.FlinkHosts(Path(work) / f'hosts-{os.path.basename(out)}', env=env)
    started = time.perf_counter()
    with cluster:
        start = time.perf_counter() - started
        cluster.make_bucket('bench')
        launcher = cluster.hosts['launcher']
        for host in cluster.hosts.hosts.values():  # the model at the same path on every host's own /tmp
            shutil.copytree(model, host.outside('/tmp/model'))
        shutil.copytree(corpus, launcher.outside('/tmp/corpus'))
        on_launcher(cluster, ['-c', 'import sys; from tests.helpers import upload; upload(*sys.argv[1:])',
                              '/tmp/corpus', 's3://bench/corpus'])
        # Partitions of bounded input run in waves, as the local Flink's (local_engine): the cluster's own
        # parallelism (its slots) would make a bundle of a half of the corpus.
        waves = ['--parallelism', str(local_engine.partitions(scale_corpus_bytes(corpus))),
                 '--execution_mode_for_batch', local_engine.EXECUTION_MODE]
        argv = build_argv('s3://bench/corpus', 's3://bench/index', '/tmp/model',
                          ['--versioned', '--run_id', 'h1', *flags, *cluster.build_flags(), *waves])
        command = cluster.hosts.command('launcher', argv, cwd=str(REPO))
        spill = [str(cluster.hosts[f'taskmanager-{i}'].outside('/tmp/flink/tmp'))
                 for i in range(cluster.settings.taskmanagers)]
        everyone = [name for name in cluster.hosts.hosts if name != 'launcher']
        row = run_measured(command, dict(os.environ, **cluster.hosts.environment(cluster.store_env)), spill, sample_s,
                           roots=lambda: [pid for name in everyone for pid in cluster.hosts.pids(name)])
        on_launcher(cluster, ['-c', 'import sys; from tests.helpers import download; download(*sys.argv[1:])',
                              's3://bench/index/runs/h1', '/tmp/h1'])
        shutil.copytree(launcher.outside('/tmp/h1'), out)
    row['cluster_start'] = start
    return row


def on_launcher(cluster, argv: list) -> None:
    done = cluster.hosts.run('launcher', [sys.executable, *argv], env=cluster.store_env, cwd=str(REPO))
    if done.returncode:
        raise RuntimeError(f'{argv[:3]} failed on the launcher ({done.returncode}):\n{done.stderr[-4000:]}')


def planted_found(out: str, plan: dict) -> dict:
    """The share of the planted exact and near copies the build dropped, and by which filter."""
    from transforms.output import tables

    reasons = {}
    for part in tables.iter_parts(os.path.join(out, tables.DROPPED_DIR), ['chunk_id', 'reason']):
        reasons.update(zip(part.column('chunk_id').to_pylist(), part.column('reason').to_pylist()))
    found = {}
    for kind in ('exact', 'near'):
        ids = plan[f'{kind}_ids']
        by = {}
        for chunk in ids:
            if chunk in reasons:
                by[reasons[chunk]] = by.get(reasons[chunk], 0) + 1
        found[kind] = {'planted': len(ids), 'found': sum(by.values()) / max(1, len(ids)), 'by': by}
    return found


def direct_fits(corpus: str, runner: str) -> tuple[bool, str]:
    from pipelines.build_index import direct_memory
    from pipelines.common import progress_meters

    size = scale_corpus_bytes(corpus)
    mode = 'multi_processing' if runner == 'multi' else 'in_memory'
    estimate = direct_memory.estimate(size, CHUNK_SIZE, 0, mode)
    return estimate.fits, (f'estimated {estimate.peak_bytes / 2**30:.1f} GiB for {progress_meters.size(size)} of '
                           f'input, the machine {estimate.machine_bytes / 2**30:.1f} GiB')


def scale_corpus_bytes(corpus: str) -> int:
    return sum(os.path.getsize(os.path.join(corpus, name)) for name in os.listdir(corpus))


def stage_seconds(manifest: dict) -> dict:
    return {k: v for k, v in manifest['seconds'].items() if k != 'wall'}


def one_build(runner: str, corpus: str, out: str, model: str, flags: list, args) -> dict:
    if runner == 'hosts':
        return hosts_build(corpus, out, model, flags, args.work, args.sample_s, args.threads)
    return local_build(runner, corpus, out, model, flags, args.work, args.sample_s, args.threads)


def measure_size(n: int, runners: list, model: str, tokenizer, args, rows: list, save) -> None:
    """Every runner's build of the corpus of `n` chunks, appended to `rows` (then `save(rows)`: a sweep takes
    hours); the DirectRunner's tables are the reference."""
    corpus = os.path.join(args.work, f'corpus-{n}')
    plan = scale_corpus.generate_corpus(corpus, n, tokenizer, CHUNK_SIZE, args.seed, args.exact_rate, args.near_rate)
    reference, outs = None, []
    for runner in runners:
        row = {'n': n, 'runner': runner}
        if runner in ('direct', 'multi'):
            fits, why = direct_fits(corpus, runner)
            if not fits:
                print(json.dumps({**row, 'skipped': why}), flush=True)
                rows.append({**row, 'skipped': why})
                save(rows)
                continue
        out = os.path.join(args.work, f'out-{runner}-{n}')
        outs.append(out)
        extra = ['--versioned', '--cache', os.path.join(args.work, f'cache-{runner}-{n}')] if (
            args.rebuild and n == args.sizes[-1] and runner == args.rebuild_runner) else []
        try:
            row.update(one_build(runner, corpus, out, model, extra + args.build_flags, args))
        except RuntimeError as e:  # said, and the other builds go on: a sweep takes hours
            row['skipped'] = f'failed: {str(e)[-1500:]}'
            print(json.dumps(row), flush=True)
            rows.append(row)
            save(rows)
            continue
        del row['log']
        run = latest_run(out)
        manifest = json.load(open(os.path.join(run, 'manifest.json')))
        row.update(chunks=manifest['counts']['chunks_before_filters'], kept=manifest['counts']['chunks'],
                   stages=stage_seconds(manifest), filters=filter_lines(manifest), planted=planted_found(run, plan),
                   identical=None if reference is None else same_tables(run, reference, runner, corpus))
        if runner in ('direct', 'multi') and reference is None:
            reference = run
        print(json.dumps(row), flush=True)
        if extra:
            try:
                row['rebuild'] = measure_rebuild(runner, corpus, out, model, extra, tokenizer, args)
            except RuntimeError as e:
                row['rebuild_failed'] = str(e)[-1500:]
            print(json.dumps({'rebuild': row.get('rebuild') or row['rebuild_failed']}), flush=True)
        rows.append(row)
        save(rows)
    if not args.keep:
        for path in [corpus, *outs]:
            shutil.rmtree(path, ignore_errors=True)


def same_tables(run: str, reference: str, runner: str, corpus: str) -> bool:
    """Whether a build's tables are the reference build's, byte for byte (on the hosts, but the corpus's name)."""
    if runner == 'hosts':
        from tests.helpers import data_files, same_build

        return same_build(data_files(Path(run)), data_files(Path(reference)), 's3://bench/corpus', corpus)
    return table_digests(run) == table_digests(reference)


def table_digests(run: str) -> dict:
    """`{relative path: sha256}` of every file of a build's tables, read a block at a time."""
    import hashlib

    from tests.helpers import DATA_DIRS

    digests = {}
    for name in DATA_DIRS:
        for path in sorted((Path(run) / name).rglob('*')):
            if path.is_file():
                digest = hashlib.sha256()
                with open(path, 'rb') as f:
                    for block in iter(lambda: f.read(1 << 20), b''):
                        digest.update(block)
                digests[str(path.relative_to(run))] = digest.hexdigest()
    return digests


def latest_run(out: str) -> str:
    """The run a build published: its output, or with --versioned the run LATEST names."""
    latest = os.path.join(out, 'LATEST')
    return os.path.join(out, 'runs', open(latest).read().strip()) if os.path.isfile(latest) else out


def measure_rebuild(runner: str, corpus: str, out: str, model: str, extra: list, tokenizer, args) -> dict:
    """The next night's build on the same root and cache, and a fresh build of the same corpus; compared."""
    changed_corpus = corpus + '-next'
    change = scale_corpus.change_corpus(corpus, changed_corpus, args.rebuild, tokenizer, CHUNK_SIZE, args.seed + 1)
    night = one_build(runner, changed_corpus, out, model, extra + args.build_flags, args)
    fresh_out = out + '-fresh'
    fresh = one_build(runner, changed_corpus, fresh_out, model, args.build_flags, args)
    manifest = json.load(open(os.path.join(latest_run(out), 'manifest.json')))
    embedding = manifest['cache']['features']['embedding']
    result = {
        'changed_documents': change['documents'],
        'rebuild_wall': night['wall'], 'rebuild_cpu': night['cpu'], 'fresh_wall': fresh['wall'],
        'fresh_cpu': fresh['cpu'], 'embedded': embedding['computed'], 'cached': embedding['hits'],
        'rebuild_kinds': night['kinds'],
        'equal_to_fresh': table_digests(latest_run(out)) == table_digests(fresh_out),
    }
    if not args.keep:
        shutil.rmtree(changed_corpus)
        shutil.rmtree(fresh_out, ignore_errors=True)
    return result


def filter_lines(manifest: dict) -> list:
    """One line per filter: before -> after, and what its strategy counted (edges, caps, residual)."""
    return [f"filter {f['name']}: {f['before']} -> {f['after']}"
            + ''.join(f', {k} {v}' for k, v in f.get('counters', {}).items())
            for f in manifest.get('filters', [])]


def report(rows: list) -> str:
    """The table of builds, then the targets."""
    kinds = [k for k in ('launcher', 'job server', 'sdk worker', 'jobmanager', 'taskmanager', 'store', 'other')
             if any(k in r.get('kinds', {}) for r in rows)]
    stages = sorted({s for r in rows for s in r.get('stages', {})})
    head = (['runner', 'N chunks', 'kept', 'wall s', 'CPU s'] + [f'{k} MiB' for k in kinds]
            + ['spilled MiB'] + [f'{s} s' for s in stages] + ['exact found', 'near found', "= direct's"])
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for r in rows:
        if 'skipped' in r:
            lines.append(f"| {r['runner']} | {r['n']} | skipped: {r['skipped'].splitlines()[0]} |")
            continue
        cells = [r['runner'], str(r['chunks']), str(r['kept']), f"{r['wall']:.1f}", f"{r['cpu']:.0f}"]
        cells += [f"{r['kinds'][k]['peak_mib']:.0f}" + (f" (x{r['kinds'][k]['count']})"
                                                        if r['kinds'][k]['count'] > 1 else '')
                  if k in r['kinds'] else '-' for k in kinds]
        cells.append(f"{r['spill_mib']:.0f}")
        cells += [f"{r['stages'].get(s, 0):.1f}" for s in stages]
        cells += [f"{r['planted'][k]['found']:.3f}" for k in ('exact', 'near')]
        cells.append('-' if r['identical'] is None else 'yes' if r['identical'] else 'NO')
        lines.append('| ' + ' | '.join(cells) + ' |')
    lines += [''] + targets(rows)
    return '\n'.join(lines)


def targets(rows: list) -> list:
    """CPU at most 1.15x linear and every process kind's peak at most 1.25x, from the second size to the last;
    the engines' wall at the last size against the DirectRunner's slope extrapolated."""
    out = []
    done = [r for r in rows if 'skipped' not in r]
    sizes = sorted({r['n'] for r in done})
    direct = sorted((r['n'], r['wall']) for r in done if r['runner'] == 'direct')
    for runner in dict.fromkeys(r['runner'] for r in done):
        mine = {r['n']: r for r in done if r['runner'] == runner}
        if len(mine) < 2:
            continue
        small, large = (sorted(mine)[1] if len(mine) > 2 else sorted(mine)[0]), max(mine)
        a, b = mine[small], mine[large]
        growth = b['cpu'] / a['cpu']
        out.append(f"{runner}: {small} -> {large} chunks ({large / small:.1f}x): CPU {growth:.2f}x "
                   f"({growth / (large / small):.2f}x linear; target <= 1.15x)")
        for kind in b['kinds']:
            if kind in a['kinds']:
                ratio = b['kinds'][kind]['peak_mib'] / a['kinds'][kind]['peak_mib']
                out.append(f"  {kind}: peak {a['kinds'][kind]['peak_mib']:.0f} -> {b['kinds'][kind]['peak_mib']:.0f} "
                           f"MiB ({ratio:.2f}x; target <= 1.25x)")
        if runner not in ('direct', 'multi') and len(direct) >= 2 and large > direct[-1][0]:
            (n0, w0), (n1, w1) = direct[-2], direct[-1]
            slope = (w1 - w0) / (n1 - n0)
            extrapolated = w1 + slope * (large - n1)
            out.append(f"  wall at {large}: {b['wall']:.0f} s against the DirectRunner's slope extrapolated "
                       f"({w0:.0f} s at {n0}, {w1:.0f} s at {n1}: {extrapolated:.0f} s): "
                       f"{b['wall'] / extrapolated:.2f}x (target <= 1.3x)")
    for r in done:
        rebuild = r.get('rebuild')
        if rebuild:
            out.append(f"nightly rebuild at {r['n']} on {r['runner']}: {rebuild['changed_documents']} documents "
                       f"changed, {rebuild['embedded']} chunks embedded ({rebuild['cached']} from the cache), "
                       f"wall {rebuild['rebuild_wall']:.0f} s against a fresh build's {rebuild['fresh_wall']:.0f} s, "
                       f"equal to the fresh build: {'yes' if rebuild['equal_to_fresh'] else 'NO'}")
    if sizes:
        found = [f"{r['runner']} {r['n']}: exact {r['planted']['exact']['found']:.3f}, near "
                 f"{r['planted']['near']['found']:.3f} {r['planted']['near']['by']}" for r in done]
        out.append('planted copies found: ' + '; '.join(found))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=str, default=DEFAULT_SIZES, help='Comma-separated corpus sizes in chunks.')
    parser.add_argument('--runners', type=str, default='direct,flink,hosts',
                        help=f'Comma-separated, in order, of {", ".join(RUNNERS)}.')
    parser.add_argument('--hosts_sizes', type=str, default='100000',
                        help='The sizes the `hosts` runner builds (a cluster of simulated hosts per build).')
    parser.add_argument('--rebuild', type=float, default=0.0,
                        help='Share of documents changed for the nightly rebuild at the last size (0: none).')
    parser.add_argument('--seed', type=int, default=11, help='Seed of the corpus generator.')
    parser.add_argument('--exact_rate', type=float, default=0.05, help='Share of paragraphs planted as exact copies.')
    parser.add_argument('--near_rate', type=float, default=0.05, help='Share planted as near copies.')
    parser.add_argument('--sample_s', type=float, default=0.5, help='Seconds between /proc samples.')
    parser.add_argument('--threads', type=int, default=1,
                        help='OMP_NUM_THREADS of the build and its workers (torch, FAISS); 0 = leave as is.')
    parser.add_argument('--work', type=str, default=None, help='Where corpora and outputs go (default: a temporary '
                                                               'folder; a million chunks take ~2 GB).')
    parser.add_argument('--keep', action='store_true', help='Keep corpora and outputs.')
    parser.add_argument('--json_out', type=str, default=None, help='Also write the rows as JSON here.')
    parser.add_argument('--report', type=str, nargs='+', default=None,
                        help='Print the table and targets of the rows in these --json_out files (runs made apart) '
                             'and exit.')
    parser.add_argument('build_flags', nargs='*', help='Extra build flags, after --.')
    args = parser.parse_args()
    if args.report:
        rows = [row for path in args.report for row in json.load(open(path))]
        print(report(sorted(rows, key=lambda r: (r['n'], RUNNERS.index(r['runner'])))))
        return
    args.sizes = [int(s) for s in args.sizes.split(',') if s.strip()]
    runners = args.runners.split(',')
    args.rebuild_runner = 'flink' if 'flink' in runners else None  # a root and cache that outlive the build
    hosts_sizes = {int(s) for s in args.hosts_sizes.split(',') if s.strip()}
    args.work = args.work or tempfile.mkdtemp(prefix='ragsieve-scale-')
    os.makedirs(args.work, exist_ok=True)

    from transformers import AutoTokenizer

    model = scale_corpus.reduced_model(args.work)
    print(f'embedding with a reduced model: all-MiniLM-L6-v2, first transformer layer only, max_seq_length '
          f'{scale_corpus.REDUCED_SEQ_LENGTH} ({model})', flush=True)
    tokenizer = AutoTokenizer.from_pretrained(model)
    def save(rows):
        if args.json_out:
            with open(args.json_out, 'w') as f:
                json.dump(rows, f, indent=1)

    rows = []
    for n in args.sizes:
        measure_size(n, [r for r in runners if r != 'hosts' or n in hosts_sizes], model, tokenizer, args, rows, save)
    print(report(rows))


if __name__ == '__main__':
    main()
