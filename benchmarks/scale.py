"""Build at growing corpus sizes: wall time, per-stage time and peak memory per process.

A deterministic synthetic corpus (sentences of Python's own documentation,
`pydoc_data.topics`, reshuffled into paragraphs by a seeded RNG) is built at
each size with `--direct_running_mode=multi_processing --direct_num_workers=2`,
one build job per size in a subprocess (the launcher). Each paragraph is cut to
fit one chunk (between half and all of --chunk_size tokens, so the recursive
chunker neither merges nor splits it): N paragraphs are N chunks. A known
fraction of paragraphs are planted copies of an earlier paragraph: exact
copies (--exact_rate) and near copies with one word replaced (--near_rate),
so the filters have real work that grows with N.

So that the pipeline, not the model, is measured, chunks are embedded with a
reduced model derived at run time from the packaged all-MiniLM-L6-v2: its
first transformer layer only and max_seq_length 64, saved to a temporary
directory and passed as `--embedding_model PATH`; torch and FAISS get one
thread per process (--threads), so two workers fit two cores.

Prints, per N: wall time, chunks/s, CPU seconds of the launcher and its
workers (wall time on a shared machine also measures the neighbours; CPU time
far less), the busy seconds of each stage from the manifest (summed over
workers), and the peak RSS (VmHWM, sampled from /proc
every --sample_s) of the launcher and of each SDK worker process. The targets
(issue 11): wall time linear within 10% from the smallest to the largest N,
worker peak RSS flat within 25%. The DirectRunner's workers grow with N by
themselves; `--control` measures that growth on a pipeline with no ragsieve
code at the same sizes in the same run and prints the ratio of the two.

    python benchmarks/scale.py [--sizes 20000,40000,80000,160000] [--json_out FILE]
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SIZES = '20000,40000,80000,160000'
PARAGRAPHS_PER_DOC = 8
DOCS_PER_FILE = 500
REDUCED_SEQ_LENGTH = 64


# --- corpus ---------------------------------------------------------------------------


def source_sentences() -> list[str]:
    """Distinct sentences (5+ words) of the pydoc topics, in a fixed order."""
    import pydoc_data.topics

    seen, out = set(), []
    for name in sorted(pydoc_data.topics.topics):
        for para in re.split(r'\n\s*\n', pydoc_data.topics.topics[name]):
            for s in re.split(r'(?<=[.!?])\s+', ' '.join(para.split())):
                if len(s.split()) >= 5 and s not in seen:
                    seen.add(s)
                    out.append(s)
    return out


def near_copy(paragraph: str, rng: random.Random) -> str:
    """The paragraph with one word in its middle half replaced: estimated Jaccard ~0.8+."""
    words = paragraph.split(' ')
    i = rng.randrange(len(words) // 4, max(len(words) // 4 + 1, 3 * len(words) // 4))
    words[i] = 'zebra' if words[i] != 'zebra' else 'quokka'
    return ' '.join(words)


def generate_corpus(
    directory: str, n_chunks: int, tokenizer, chunk_size: int, seed: int,
    exact_rate: float, near_rate: float,
) -> dict:
    """Writes `n_chunks` paragraphs as .jsonl documents under `directory`; returns the plan.

    Every paragraph holds between chunk_size/2 + 1 and chunk_size - 4 tokens, so
    each is one chunk of the recursive chunker, and joins two or more
    sentences; paragraphs are distinct but for the planted copies. Same
    arguments, same bytes.
    """
    sentences = source_sentences()
    lengths = [len(ids) for ids in tokenizer(sentences, add_special_tokens=False)['input_ids']]
    # Spaces make no tokens: a paragraph's tokens are about the sum of its sentences'.
    # Over half the size, two paragraphs never fit in one chunk.
    low, high = chunk_size // 2 + 1, chunk_size - 4
    # Short enough that every paragraph joins two or more: a one-sentence paragraph
    # would repeat by chance (2,728 sentences), and only planted copies may repeat.
    usable = [(s, n) for s, n in zip(sentences, lengths) if n <= high // 2]
    rng = random.Random(seed)

    def fits(paragraph: str) -> bool:
        return low <= len(tokenizer(paragraph, add_special_tokens=False)['input_ids']) <= high

    paragraphs: list[str] = []
    seen: set[str] = set()
    planted = {'exact': 0, 'near': 0}
    while len(paragraphs) < n_chunks:
        roll = rng.random()
        if paragraphs and roll < exact_rate:
            paragraphs.append(paragraphs[rng.randrange(len(paragraphs))])
            planted['exact'] += 1
            continue
        if paragraphs and roll < exact_rate + near_rate:
            copy = near_copy(paragraphs[rng.randrange(len(paragraphs))], rng)
            if copy not in seen and fits(copy):
                paragraphs.append(copy)
                seen.add(copy)
                planted['near'] += 1
            continue
        picked, total = [], 0
        while total < low:
            s, n = usable[rng.randrange(len(usable))]
            if total + n <= high:
                picked.append(s)
                total += n
            else:
                break
        paragraph = ' '.join(picked)
        if paragraph not in seen and fits(paragraph):
            paragraphs.append(paragraph)
            seen.add(paragraph)
    os.makedirs(directory, exist_ok=True)
    docs = [paragraphs[i : i + PARAGRAPHS_PER_DOC] for i in range(0, len(paragraphs), PARAGRAPHS_PER_DOC)]
    for f in range(0, len(docs), DOCS_PER_FILE):
        with open(os.path.join(directory, f'part-{f // DOCS_PER_FILE:05d}.jsonl'), 'w') as out:
            for d, paras in enumerate(docs[f : f + DOCS_PER_FILE], start=f):
                out.write(json.dumps({'id': f'doc{d:07d}', 'text': '\n\n'.join(paras)}) + '\n')
    return {'paragraphs': len(paragraphs), 'documents': len(docs), 'planted': planted}


def reduced_model(directory: str) -> str:
    """Saves all-MiniLM-L6-v2 cut to its first layer and max_seq_length 64; returns the path."""
    from transforms.features.models import DEFAULT_EMBEDDING_MODEL, load_embedding_model

    model = load_embedding_model(DEFAULT_EMBEDDING_MODEL)
    bert = model[0].auto_model
    bert.encoder.layer = bert.encoder.layer[:1]
    bert.config.num_hidden_layers = 1
    model.max_seq_length = REDUCED_SEQ_LENGTH
    path = os.path.join(directory, 'minilm-1layer-64')
    model.save(path)
    return path


# --- measuring ------------------------------------------------------------------------


def build_once(
    corpus: str, out: str, model: str, chunk_size: int, sample_s: float, threads: int, extra: list[str],
) -> dict:
    """Runs one build job in a subprocess; returns its manifest, wall and CPU time, peak RSS per process."""
    sys.path.insert(0, REPO)
    import resource

    from benchmarks.process_memory import TreeSampler

    argv = [
        sys.executable, '-m', 'pipelines.build_index', '--input', corpus, '--output', out,
        '--embedding_model', model, '--chunk_size', str(chunk_size),
        '--direct_running_mode=multi_processing', '--direct_num_workers=2', *extra,
    ]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    if threads:
        # Workers inherit it: two workers of N torch threads each on a small, shared machine
        # would measure the oversubscription, not the pipeline.
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler(proc.pid, sample_s)
    sampler.start()
    log, _ = proc.communicate()
    wall = time.perf_counter() - started
    sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Launcher and every worker it waited for: robust to other load on the machine, unlike wall time.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        raise RuntimeError(f'build failed ({proc.returncode}):\n{log[-4000:]}')
    with open(os.path.join(out, 'manifest.json')) as f:
        manifest = json.load(f)
    # The SDK workers are Python processes (a shell wrapper may carry the same command line).
    workers = {pid: kib for pid, kib in sampler.peaks.items()
               if pid != proc.pid and 'sdk_worker' in sampler.cmdlines.get(pid, '') and kib > 32 * 1024}
    return {
        'wall': wall,
        'cpu': cpu,
        'manifest': manifest,
        'launcher_mib': sampler.peaks.get(proc.pid, 0) / 1024,
        'worker_mib': sorted((kib / 1024 for kib in workers.values()), reverse=True),
        'other_mib': sorted((kib / 1024 for pid, kib in sampler.peaks.items()
                             if pid != proc.pid and pid not in workers), reverse=True),
    }


def stage_seconds(manifest: dict) -> dict:
    return {k: v for k, v in manifest['seconds'].items() if k != 'wall'}


def filter_lines(manifest: dict) -> list[str]:
    """One line per filter: before -> after, and what its strategy counted (edges, caps, residual)."""
    return [f"filter {f['name']}: {f['before']} -> {f['after']}"
            + ''.join(f', {k} {v}' for k, v in f.get('counters', {}).items())
            for f in manifest.get('filters', [])]


def control_line(rows: list[dict]) -> str:
    """Worker peak RSS growth next to the runner's own (benchmarks/runner_memory.py), same sizes, same run."""
    from benchmarks.runner_memory import control_peaks

    a, b = rows[0], rows[-1]
    ca, cb = control_peaks(a['n'])[1], control_peaks(b['n'])[1]
    build = max(b['worker_mib']) / max(a['worker_mib'])
    runner = max(cb) / max(ca)
    return (f"control (no ragsieve code) at {a['n']} -> {b['n']} elements: largest worker peak RSS "
            f"{max(ca):.0f} -> {max(cb):.0f} MiB ({runner:.2f}x); the build's {build:.2f}x is "
            f"{build / runner:.2f}x the runner's own growth")


def report(rows: list[dict]) -> str:
    """A Markdown table of the runs, then the growth from the first size to the last."""
    stages = sorted({k for r in rows for k in stage_seconds(r['manifest'])})
    head = (['N chunks', 'kept', 'wall s', 'chunks/s', 'CPU s']
            + [f'{s} s' for s in stages] + ['launcher MiB', 'workers MiB'])
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for r in rows:
        counts = r['manifest']['counts']
        n = counts['chunks_before_filters']
        secs = stage_seconds(r['manifest'])
        cells = [str(n), str(counts['chunks']), f"{r['wall']:.1f}", f"{n / r['wall']:.0f}", f"{r.get('cpu', 0):.0f}"]
        cells += [f'{secs.get(s, 0):.1f}' for s in stages]
        cells += [f"{r['launcher_mib']:.0f}", ' / '.join(f'{m:.0f}' for m in r['worker_mib']) or '-']
        lines.append('| ' + ' | '.join(cells) + ' |')
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        na, nb = a['manifest']['counts']['chunks_before_filters'], b['manifest']['counts']['chunks_before_filters']
        wa, wb = max(a['worker_mib'] or [0]), max(b['worker_mib'] or [0])
        lines.append('')
        lines.append(
            f"{na} -> {nb} chunks ({nb / na:.2f}x): wall time {b['wall'] / a['wall']:.2f}x, "
            f"CPU time {b.get('cpu', 0) / max(a.get('cpu', 0), 1e-9):.2f}x "
            f"(linear within 10%: <= {1.1 * nb / na:.2f}x), largest worker peak RSS "
            f"{wb / wa if wa else float('nan'):.2f}x (flat within 25%: <= 1.25x), launcher peak RSS "
            f"{b['launcher_mib'] / a['launcher_mib']:.2f}x")
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=str, default=DEFAULT_SIZES,
                        help='Comma-separated corpus sizes in chunks.')
    parser.add_argument('--chunk_size', type=int, default=48, help='The build\'s --chunk_size (tokens).')
    parser.add_argument('--seed', type=int, default=11, help='Seed of the corpus generator.')
    parser.add_argument('--exact_rate', type=float, default=0.05,
                        help='Fraction of paragraphs that are exact copies of an earlier one.')
    parser.add_argument('--near_rate', type=float, default=0.05,
                        help='Fraction of paragraphs that are near copies (one word replaced).')
    parser.add_argument('--sample_s', type=float, default=0.5, help='Seconds between /proc samples.')
    parser.add_argument('--threads', type=int, default=1,
                        help='OMP_NUM_THREADS of the build and its workers (torch, FAISS); 0 = leave as is.')
    parser.add_argument('--json_out', type=str, default=None, help='Also write the results as JSON here.')
    parser.add_argument('--keep', type=str, default=None,
                        help='Keep corpora and outputs under this folder (default: a temporary one).')
    parser.add_argument('--control', action='store_true',
                        help='Also run benchmarks/runner_memory.py at the first and last size and print the '
                             'workers\' growth against the runner\'s own.')
    parser.add_argument('build_flags', nargs='*', help='Extra build flags, after --.')
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(',') if s.strip()]

    sys.path.insert(0, REPO)
    from transformers import AutoTokenizer

    work = args.keep or tempfile.mkdtemp(prefix='ragsieve-scale-')
    os.makedirs(work, exist_ok=True)
    model = reduced_model(work)
    print(f'embedding with a reduced model: all-MiniLM-L6-v2, first transformer layer only, '
          f'max_seq_length {REDUCED_SEQ_LENGTH}, saved at {model} (--embedding_model {model})', flush=True)
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = []
    for n in sizes:
        corpus = os.path.join(work, f'corpus-{n}')
        plan = generate_corpus(corpus, n, tokenizer, args.chunk_size, args.seed, args.exact_rate, args.near_rate)
        print(f'N={n}: {plan["documents"]} documents, planted {plan["planted"]["exact"]} exact and '
              f'{plan["planted"]["near"]} near copies; building...', flush=True)
        row = build_once(corpus, os.path.join(work, f'out-{n}'), model, args.chunk_size, args.sample_s,
                         args.threads, args.build_flags)
        row['n'] = n
        row['plan'] = plan
        rows.append(row)
        print(report(rows[-1:]).splitlines()[-1], flush=True)
        for line in filter_lines(row['manifest']):
            print(line, flush=True)
        if args.json_out:
            with open(args.json_out, 'w') as f:
                json.dump(rows, f, indent=2)
        if not args.keep:
            import shutil

            shutil.rmtree(corpus)
            shutil.rmtree(os.path.join(work, f'out-{n}'), ignore_errors=True)
    print(report(rows))
    if args.control and len(rows) > 1:
        print(control_line(rows), flush=True)


if __name__ == '__main__':
    main()
