"""What showing progress costs a build: wall time with --progress none, log and bar, side by side.

Builds the Chroma corpora (recursive 400/200, the default cascade) in fresh
processes, alternating `--progress none`, `--progress log` at a 1 s
interval (30 times the lines of the default) and `--progress bar` (the live
view drawn to a pipe, rich forced to render it), over --repeats rounds, so
noise from a shared machine hits all alike; the fastest of each counts.
A shared machine's noise is larger than the 1% target, so the script also
times what the workers add per call (`transforms.progress.Tally.count`, sending
included) and prints that bound: calls made x cost per call / wall time.
Prints each mode's seconds and its ratio to `none` (target <= 1.01).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import timeit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

MODES = {
    'none': ['--progress', 'none'],
    'log': ['--progress', 'log', '--progress_interval', '1'],
    'bar': ['--progress', 'bar'],
}


def build_seconds(data: str, out: str, flags: list) -> float:
    """Wall seconds of one build in a fresh process (model load included, as a user's run)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, '-m', 'pipelines.cli', 'build', '--input', data, '--output', out,
                    '--chunker', 'recursive', '--chunk_size', '400', '--chunk_overlap', '200', *flags],
                   cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def count_cost() -> float:
    """Seconds per `progress.Tally.count` call with a listener set, sends at most every 0.5 s included."""
    import socket

    from transforms import progress

    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(('127.0.0.1', 0))
    os.environ[progress.ENV] = f'127.0.0.1:{listener.getsockname()[1]}'
    try:
        n, tally = 200_000, progress.Tally()
        return timeit.timeit(lambda: tally.count(progress.EMBEDDED, 8), number=n) / n
    finally:
        del os.environ[progress.ENV]
        listener.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', type=str, default=os.path.join(REPO, '..', 'shared', 'data', 'chroma'),
                        help='Folder with the Chroma corpora (*.md).')
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    data = os.path.join(os.path.abspath(args.data), '*.md')
    seconds = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeats):
            for mode, flags in MODES.items():
                seconds[mode].append(build_seconds(data, os.path.join(tmp, f'{mode}{round_}'), flags))
                print(f'round {round_ + 1} {mode}: {seconds[mode][-1]:.1f} s', flush=True)
        import json

        manifest = json.load(open(os.path.join(tmp, 'none0', 'manifest.json')))
    floor = min(seconds['none'])
    print(f"\n{manifest['counts']['chunks']} chunks; fastest of {args.repeats} rounds")
    print('| progress | wall s | ratio to none |')
    print('| --- | --- | --- |')
    for mode in MODES:
        print(f'| {mode} | {min(seconds[mode]):.1f} | {min(seconds[mode]) / floor:.3f} |')
    # The workers' side: one call per file read, per document chunked, per embedding batch, per filter's
    # bundle and per part written; bounded above by a few calls per chunk.
    per_call = count_cost()
    calls = 4 * manifest['counts']['chunks']
    print(f'\nTally.count: {per_call * 1e6:.2f} us a call; {calls:,} calls (4 per chunk, an upper bound) '
          f'= {calls * per_call:.3f} s, {calls * per_call / floor:.4%} of the build')


if __name__ == '__main__':
    main()
