"""A build's progress as its user sees it: a live view in a pseudo-terminal, timed lines in a log.

Both in process and with multi_processing workers, whose counts reach the
launcher over its listener; the outputs are the bytes of a build without
progress.
"""

import fcntl
import logging
import os
import pty
import random
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from pipelines.build_index import job as build_index
from tests.helpers import REPO, data_files

# Small chunks in small batches: ~150 chunks, the embed meter moves many times.
FLAGS = ['--chunk_size', '64', '--embed_batch_size', '4', '--num_shards', '1']
WORKERS = {
    'in process': [],
    'multi_processing': ['--direct_running_mode', 'multi_processing', '--direct_num_workers', '2'],
}
ANSI = re.compile(r'\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-B]|\r')


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
    """30 text files of distinct sentences (seeded), ~150 chunks of 64 tokens that no filter drops."""
    words = sorted({w.strip('.,;:()"').lower() for w in (REPO / 'sample_corpus' / 'history.txt').read_text().split()
                    if w.strip('.,;:()"').isalpha()})
    rng = random.Random(7)
    root = tmp_path_factory.mktemp('progress_corpus')
    for d in range(30):
        paragraphs = ['. '.join(' '.join(rng.choice(words) for _ in range(12)).capitalize() for _ in range(5)) + '.'
                      for _ in range(4)]
        (root / f'doc{d:03d}.txt').write_text('\n\n'.join(paragraphs) + '\n', encoding='utf-8')
    return root


@pytest.fixture(scope='module')
def quiet_build(corpus, tmp_path_factory):
    """The build's tables with --progress none: what every other build here must write."""
    out = tmp_path_factory.mktemp('quiet') / 'out'
    build_index.run(['--input', str(corpus), '--output', str(out), *FLAGS, '--progress', 'none'])
    return data_files(out)


def read_terminal(master: int, process: subprocess.Popen, timeout: float = 600) -> str:
    """What the build wrote to its terminal, until it exits and the terminal closes."""
    screen, deadline = bytearray(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal closed it
                break
            if not data:
                break
            screen += data
        elif process.poll() is not None:
            break
    return screen.decode('utf-8', 'replace')


@pytest.mark.parametrize('workers', WORKERS)
def test_a_terminal_sees_the_bar_grow(corpus, quiet_build, tmp_path, workers):
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack('HHHH', 40, 220, 0, 0))  # rows, columns
    out = tmp_path / 'out'
    process = subprocess.Popen(
        [sys.executable, '-m', 'pipelines.cli', 'build', '--input', str(corpus), '--output', str(out), *FLAGS,
         *WORKERS[workers]],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, close_fds=True,
        env={**os.environ, 'COLUMNS': '220', 'TERM': 'xterm-256color'})
    os.close(terminal)
    try:
        screen = ANSI.sub('', read_terminal(master, process))
        assert process.wait(timeout=60) == 0, screen[-3000:]
    finally:
        os.close(master)
    # --progress auto on a terminal: the live view, redrawn as the counts grow.
    embedded = [int(n) for n in re.findall(r'embed +\S* *(\d+)/(?:\d+) chunks', screen)]
    assert embedded == sorted(embedded), embedded
    assert len({n for n in embedded if 0 < n < embedded[-1]}) >= 1 and embedded[-1] > 100, embedded
    assert re.search(r'✓ load embedding model +all-MiniLM-L6-v2, \d+\.\d s', screen)
    assert re.search(r'✓ list input +30 files, \d+\.\d kB', screen)
    assert 'ragsieve build: 30 files, 30 documents read' in screen  # the summary follows the view
    assert data_files(out) == quiet_build


def test_a_log_gets_a_timed_line_every_interval_from_multi_processing_workers(corpus, quiet_build, tmp_path, caplog):
    # In process, the same view's log mode is tested without a build (tests/pipelines/common/test_progress.py) and
    # the workers' counts reach it in the terminal test above.
    caplog.set_level(logging.INFO, logger='ragsieve.build')
    out = tmp_path / 'out'
    build_index.run(['--input', str(corpus), '--output', str(out), *FLAGS, *WORKERS['multi_processing'],
                     '--progress', 'log', '--progress_interval', '0.5'])
    lines = [r.getMessage() for r in caplog.records if r.name == 'ragsieve.build']
    timed = [line for line in lines if line.startswith('progress ')]
    chunks = [int(n) for line in timed for n in re.findall(r'; embed (\d+)/', line)]
    assert len(timed) >= 2 and chunks == sorted(chunks) and len(set(chunks)) >= 2, timed
    (done,) = [line for line in lines if line.startswith('done in ')]
    assert re.search(r'read 30/30 files, 30 documents; chunk (\d+) chunks; embed \1/\1 chunks, [\d.]+ chunks/s; '
                     r'filter kept \1, dropped 0 \(exact 0, minhash 0, intra_doc 0\); write 4/4 parts$', done), done
    # Each step logged with its time (the model is loaded once per process: a second build reuses it).
    assert any(re.fullmatch(r'list input \(30 files, [\d.]+ kB\): \d+\.\d s', line) for line in lines), lines
    assert any(line == f'Report: {out}/report.html' for line in lines)  # the published path, not the staging one
    assert data_files(out) == quiet_build
