"""Whether the DirectRunner can hold an input: its peak memory estimated from the listing, before the pipeline.

Beam's DirectRunner (the FnApiRunner, in process or with multi_processing
workers) buffers every PCollection in memory, so its peak grows with the
corpus, linearly: a corpus past the machine's memory is killed by the
kernel's OOM killer hours in. A build refuses such an input before
anything loads, naming the estimate, the machine's memory and the runner
that spills to disk (`--runner FlinkRunner`, `local_engine`); `--memory_check
off` goes on anyway. The slopes were measured on this project's benchmark
corpora (docs/scale.md) and are rounded up: the estimate errs on the side
of refusing (measured peaks were 9% to 41% below it). File sizes are what
the listing gives: a compressed input (Parquet) holds more text than its
bytes say, a PDF less.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from pipelines.common import progress_meters

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10
# Bytes of English text per token of all-MiniLM-L6-v2's tokenizer (4.3 to 4.7 on the benchmark corpora), rounded
# down, and the share of `--chunk_size` a chunk fills at least (the recursive chunker cuts at paragraphs: the
# benchmark's are half to all of it): more chunks than the corpus will make, not fewer.
BYTES_PER_TOKEN = 4.0
FILL = 0.5
# Peak RSS of a build that holds (almost) nothing (the interpreter, Beam, torch, the model, the runner), what each
# chunk adds (its embedding, signature and ids in the runner's buffers of every stage) and each byte of chunk text
# (held in several buffers at once), for all the build's processes together. Measured in process on
# benchmarks/scale.py's corpora of 48- and 400-token chunks, 10k to 100k chunks, and with two workers at 20k and
# 160k (docs/scale.md), then rounded up.
BASE_BYTES = {'in_memory': 1700 * MIB, 'multi_processing': 3800 * MIB}
CHUNK_BYTES = {'in_memory': 17 * KIB, 'multi_processing': 34 * KIB}
TEXT_FACTOR = {'in_memory': 4, 'multi_processing': 8}
# Of the machine's memory, what a build may plan to use: the rest is the kernel's, the page cache's and others'.
USABLE_SHARE = 0.85


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A DirectRunner build's peak memory, estimated, and the machine's.

    Attributes:
      chunks: Chunks the input's bytes make at most, about.
      peak_bytes: Peak memory of the build's processes together.
      machine_bytes: The machine's memory (or its cgroup's limit, where lower).
    """

    chunks: int
    peak_bytes: int
    machine_bytes: int

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= USABLE_SHARE * self.machine_bytes


def machine_memory() -> int:
    """This machine's memory in bytes: MemTotal, or the memory cgroup's limit where lower (a container)."""
    total = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    for path in ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'):
        try:
            with open(path) as f:
                limit = f.read().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit))
    return total


def estimate(input_bytes: int, chunk_size: int, chunk_overlap: int, mode: str,
             machine_bytes: Optional[int] = None) -> Estimate:
    """The peak memory of a DirectRunner build of `input_bytes` of text, in `mode` (`in_memory` or
    `multi_processing`); overlapping chunks carry their text twice."""
    chunks = chunks_estimate(input_bytes, chunk_size, chunk_overlap)
    text = input_bytes * chunk_size / max(1, chunk_size - chunk_overlap)
    peak = BASE_BYTES[mode] + chunks * CHUNK_BYTES[mode] + text * TEXT_FACTOR[mode]
    return Estimate(chunks, int(peak), machine_memory() if machine_bytes is None else machine_bytes)


def chunks_estimate(input_bytes: int, chunk_size: int, chunk_overlap: int, fill: float = FILL) -> int:
    """The chunks `input_bytes` of text make, about: chunks advance by `chunk_size - chunk_overlap` tokens,
    `fill` of a chunk each (`FILL`: at least, so at most this many chunks; 1.0: at least this many)."""
    step = max(1, chunk_size - chunk_overlap)
    return int(input_bytes / (fill * step * BYTES_PER_TOKEN)) + 1


def refusal(estimate: Estimate, input_bytes: int, files: int) -> str:
    """The one line a build that would not fit stops with."""
    files_text = f'{files:,} file' + ('' if files == 1 else 's')
    return (f'--input holds {progress_meters.size(input_bytes)} in {files_text}: about {estimate.chunks:,} chunks, '
            f'which the DirectRunner would hold in memory, about {estimate.peak_bytes / GIB:.1f} GiB at its peak, and '
            f'this machine has {estimate.machine_bytes / GIB:.1f} GiB; pass --runner FlinkRunner (an embedded Flink '
            'that spills to disk, installed by `make engines`), or --memory_check off to try anyway')
