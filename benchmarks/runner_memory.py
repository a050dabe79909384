"""Control for benchmarks/scale.py: the DirectRunner's own memory on a pipeline with no ragsieve code.

`Create` -> `Map` -> `Reshuffle` -> `Map` -> `Reshuffle` -> `Map` ->
`Count.Globally` over N elements of about 1.8 KB (an id, 250 characters and
384 float32, like a chunk's embedding; `--floats 1024`: about 4.3 KB, like a
chunk with its embedding, MinHash signature and text), with `--direct_running_mode=multi_processing
--direct_num_workers=2`: no step gathers anything, so whatever grows with N in
the launcher or the SDK workers is the runner's. Prints the peak RSS (VmHWM)
of the launcher and of each worker per N.

    python benchmarks/runner_memory.py --sizes 20000,160000
"""

import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PIPELINE = r'''
import sys
import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

n = int(sys.argv[1])
floats = int(sys.argv[2])


def ids(start):
    return range(start, min(start + 500, n))


def payload(i):
    return ('doc%07d' % i, 'x' * 250, np.full(floats, i, np.float32))


def work(element):
    total = 0
    for _ in range(2000):
        total += 1
    return element


options = PipelineOptions(['--direct_running_mode=multi_processing', '--direct_num_workers=2'])
with beam.Pipeline(options=options) as p:
    _ = (p | 'Starts' >> beam.Create(list(range(0, n, 500))) | 'Ids' >> beam.FlatMap(ids)
         | 'Payload' >> beam.Map(payload) | 'Shuffle1' >> beam.Reshuffle() | 'Work1' >> beam.Map(work)
         | 'Shuffle2' >> beam.Reshuffle() | 'Work2' >> beam.Map(work) | 'Count' >> beam.combiners.Count.Globally())
'''


def control_peaks(n: int, floats: int = 384) -> tuple[float, list[float], float]:
    """Runs the control pipeline on `n` elements of `floats` float32 each.

    Returns:
      `(launcher MiB, worker MiB largest first, seconds)`.
    """
    sys.path.insert(0, REPO)
    from benchmarks.process_memory import TreeSampler

    proc = subprocess.Popen([sys.executable, '-c', PIPELINE, str(n), str(floats)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = TreeSampler(proc.pid, 0.3)
    sampler.start()
    started = time.perf_counter()
    if proc.wait():
        raise RuntimeError(f'the control pipeline failed ({proc.returncode})')
    sampler.stop()
    workers = sorted((kib / 1024 for pid, kib in sampler.peaks.items()
                      if 'sdk_worker' in sampler.cmdlines.get(pid, '') and kib > 32 * 1024), reverse=True)
    return sampler.peaks[proc.pid] / 1024, workers, time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=str, default='20000,160000', help='Comma-separated element counts.')
    parser.add_argument('--floats', type=int, default=384,
                        help='float32 per element (384: an embedding; 1024: about a chunk with its '
                             'embedding, MinHash signature and text).')
    args = parser.parse_args()
    for n in [int(s) for s in args.sizes.split(',') if s.strip()]:
        launcher, workers, seconds = control_peaks(n, args.floats)
        print(f'N={n}: {seconds:.0f} s, launcher {launcher:.0f} MiB, '
              f'workers {" / ".join(f"{w:.0f}" for w in workers)} MiB', flush=True)


if __name__ == '__main__':
    main()
