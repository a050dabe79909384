"""Ctrl-C and SIGTERM during a real build: the documented status, one line, no traceback, the terminal restored."""

import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time

from pipelines.common import exits
from tests.helpers import REPO


def start_build(tmp_path, mode, stderr):
    corpus = tmp_path / 'corpus'
    shutil.copytree(REPO / 'sample_corpus', corpus)
    argv = [sys.executable, '-m', 'pipelines.build_index', '--input', str(corpus), '--output',
            str(tmp_path / 'out'), '--versioned', '--progress', mode, '--progress_interval', '0.5']
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr,
                            env={**os.environ, 'PYTHONPATH': str(REPO)})


def read_until(fd, seen: bytearray, needle: bytes, seconds: float = 300) -> None:
    """Reads `fd` into `seen` until it holds `needle`, the process ends or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the pty closed: the process ended
                return
            if not data:
                return
            seen.extend(data)


def test_ctrl_c_while_the_pipeline_runs_is_exit_130_in_one_line(tmp_path):
    read_end, write_end = os.pipe()
    build = start_build(tmp_path, 'log', write_end)
    os.close(write_end)
    seen = bytearray()
    read_until(read_end, seen, b': read ')  # a meters line: the pipeline runs
    assert b': read ' in seen, seen.decode(errors='replace')[-3000:]
    build.send_signal(signal.SIGINT)
    read_until(read_end, seen, b'\0')
    assert build.wait(timeout=120) == exits.INTERRUPTED, seen.decode(errors='replace')[-3000:]
    stderr = seen.decode(errors='replace')
    assert 'Traceback' not in stderr and 'KeyboardInterrupt' not in stderr, stderr[-3000:]
    assert stderr.splitlines()[-1] == 'ragsieve build: interrupted'
    assert not list((tmp_path / 'out').glob('LATEST'))  # nothing published
    from transforms.output import snapshots

    with snapshots.lock(str(tmp_path / 'out')):  # released
        pass


def test_sigterm_of_a_bar_build_is_exit_143_with_the_cursor_shown_again(tmp_path):
    main, terminal = pty.openpty()
    build = start_build(tmp_path, 'bar', terminal)
    os.close(terminal)
    seen = bytearray()
    read_until(main, seen, b'parts')  # the write meter's row: the pipeline runs
    assert b'parts' in seen, seen.decode(errors='replace')[-3000:]
    build.send_signal(signal.SIGTERM)
    read_until(main, seen, b'ragsieve build: terminated')
    assert build.wait(timeout=120) == exits.TERMINATED, seen.decode(errors='replace')[-3000:]
    os.close(main)
    screen = seen.decode(errors='replace')
    assert 'Traceback' not in screen, screen[-3000:]
    assert screen.rindex('\x1b[?25h') > screen.rindex('\x1b[?25l')  # rich hid the cursor, and showed it again
    assert 'ragsieve build: terminated' in screen
