"""Where the seconds of a small build go outside embedding: a per-phase breakdown.

Runs `ragsieve build` (the in-memory DirectRunner, one process) on a small
corpus --repeats times, each in a fresh process, and times its phases from
inside that process by wrapping the functions that start them: interpreter
start, the build module's imports, options (torch's import), the model load
(on OpenVINO: its saved graph read back and compiled, or the whole model
loaded) and its kernel probe, on OpenVINO the conversion (int8: the
quantization) a machine's first build makes and the precision check, spaCy, pipeline construction, the pipeline run (its
stages' busy seconds from the manifest, the runner's own overhead apart),
manifest and gates, report.html, publishing, and the interpreter's exit.
Prints the median of each phase over the runs.

    python benchmarks/fixed_cost.py --input sample_corpus --repeats 5 [--embed_precision bf16]

Run it with cwd at the tree to measure: that tree's code is what builds.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

# Stage busy seconds of the manifest, measured inside the pipeline run.
STAGES = ('read', 'chunk', 'embed', 'minhash', 'entities', 'write', 'index', 'bm25')


def child(argv: list[str], output: str, times_file: str) -> None:
    """Runs `ragsieve build` in this process as its command line does; writes its phases to `times_file`."""
    marks = {'started': time.time()}
    sys.path.insert(0, os.getcwd())
    # Imported here to time them apart, so outside the CLI's own handling of
    # the collector around this import: the figure is the same for any tree.
    from pipelines import cli
    from pipelines.build_index import job as build_index

    marks['imported'] = time.time()
    spans: dict[str, float] = {}
    _wrap_phases(build_index, spans)
    sys.argv = ['ragsieve', 'build', *argv]
    status = cli.main()
    spans['finished'] = time.time()
    with open(os.path.join(output, 'manifest.json')) as f:
        seconds = json.load(f)['seconds']
    with open(times_file, 'w') as f:
        json.dump({'marks': marks, 'spans': spans, 'seconds': seconds}, f)
    sys.exit(status)


def _timed(owner, name: str, spans: dict, phase: str) -> None:
    """Replaces `owner.name` by a wrapper that adds its wall seconds to `spans[phase]`."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spans[phase] = spans.get(phase, 0.0) + time.perf_counter() - started

    setattr(owner, name, wrapper)


def _wrap_phases(build_index, spans: dict) -> None:
    import apache_beam as beam

    from pipelines.build_index import gates as build_gates
    from transforms.features import embedding
    from transforms.output import publish

    _timed(build_index, 'parse_args', spans, 'options')
    _timed(build_index.BuildConfig, 'from_options', spans, 'options')
    _timed(embedding, 'load_embedding_model', spans, 'model_load')
    # On OpenVINO: the whole load, or its read-back (compile included); a conversion inside it counts apart.
    _timed(embedding.openvino_model, 'load', spans, 'model_load')
    _timed(embedding, 'kernel_probe', spans, 'kernel_probe')
    _timed(embedding.precisions, 'set_precision', spans, 'conversion')
    _timed(build_index, 'check_precision', spans, 'precision_check')
    _timed(build_index, 'check_ner', spans, 'spacy')
    _timed(build_index, 'build_pipeline', spans, 'construction')
    _timed(beam.Pipeline, 'run', spans, 'pipeline_run')
    _timed(build_index, 'make_manifest', spans, 'manifest_gates')
    _timed(build_index, 'change_report', spans, 'manifest_gates')
    _timed(build_gates, 'verdict', spans, 'manifest_gates')
    _timed(build_gates, 'write_report', spans, 'report')
    _timed(publish, 'publish', spans, 'publish')


def one_run(corpus: str, chunk_size: int, precision: Optional[str], flags: Sequence[str] = ()) -> dict:
    """Seconds of each phase of one build in a fresh process (`flags`: more of the build's flags; precision
    None: the build's default)."""
    with tempfile.TemporaryDirectory() as tmp:
        times_file = os.path.join(tmp, 'times.json')
        argv = ['--input', corpus, '--output', os.path.join(tmp, 'out'), '--chunk_size', str(chunk_size),
                *(['--embed_precision', precision] if precision else []), *flags]
        started = time.time()
        subprocess.run([sys.executable, os.path.abspath(__file__), '--child', times_file, '--', *argv],
                       check=True, capture_output=True)
        ended = time.time()
        with open(times_file) as f:
            got = json.load(f)
    return phases(started, ended, got)


def phases(started: float, ended: float, got: dict) -> dict:
    """Splits a run's wall seconds into phases; the rest of the launcher is `other`."""
    marks, spans, seconds = got['marks'], got['spans'], got['seconds']
    busy = {s: seconds.get(s, 0.0) for s in STAGES}
    out = {
        'interpreter start': marks['started'] - started,
        'imports (Beam, ragsieve)': marks['imported'] - marks['started'],
        'options (torch import)': spans.get('options', 0.0),
        'model load': spans.get('model_load', 0.0) - spans.get('conversion', 0.0),
        'kernel probe': spans.get('kernel_probe', 0.0),
        'OpenVINO: conversion (int8: quantization) and compile': spans.get('conversion', 0.0),
        'OpenVINO: precision check': spans.get('precision_check', 0.0),
        'spaCy load': spans.get('spacy', 0.0),
        'pipeline construction': spans.get('construction', 0.0),
        'run: embed': busy['embed'],
        'run: other stages (busy)': sum(v for s, v in busy.items() if s != 'embed'),
        'run: runner overhead': spans.get('pipeline_run', 0.0) - sum(busy.values()),
        'manifest, diff, gates': spans.get('manifest_gates', 0.0),
        'report.html': spans.get('report', 0.0),
        'publish': spans.get('publish', 0.0),
        'interpreter exit': ended - spans['finished'],
    }
    out['other (launcher)'] = (spans['finished'] - marks['imported']) - sum(
        v for k, v in out.items() if k not in ('interpreter start', 'imports (Beam, ragsieve)', 'interpreter exit')
    )
    out['total'] = ended - started
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--input', type=str, default='sample_corpus', help='The corpus to build.')
    parser.add_argument('--chunk_size', type=int, default=64, help='The build\'s --chunk_size.')
    parser.add_argument('--repeats', type=int, default=5, help='Builds, each in a fresh process; medians count.')
    parser.add_argument('--embed_precision', type=str, default=None, choices=('fp32', 'bf16', 'int8'),
                        help='The build\'s --embed_precision (default: none given, the build\'s own default). '
                             'The runs share a fresh OpenVINO cache (transforms/features/openvino_cache.py): '
                             'on OpenVINO the first converts and checks, the next read both back (the max '
                             'column is the first run).')
    parser.add_argument('--build_flags', type=str, default='',
                        help='More flags of the build, one string: e.g. "--chunker recursive --chunk_overlap 200 '
                             '--filter none" for the Chroma build of build_throughput.py.')
    parser.add_argument('--child', type=str, default=None, help=argparse.SUPPRESS)  # one build's own process
    args, rest = parser.parse_known_args()
    if args.child:
        argv = [a for a in rest if a != '--']
        child(argv, argv[argv.index('--output') + 1], args.child)
        return
    with tempfile.TemporaryDirectory() as machine_cache:
        os.environ['RAGSIEVE_OPENVINO_CACHE'] = machine_cache
        runs = [one_run(args.input, args.chunk_size, args.embed_precision, shlex.split(args.build_flags))
                for _ in range(args.repeats)]
    print(f'| phase | median s (of {args.repeats}) | min s | max s |\n|---|---|---|---|')
    for phase in runs[0]:
        values = [r[phase] for r in runs]
        print(f'| {phase} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |')


if __name__ == '__main__':
    main()
