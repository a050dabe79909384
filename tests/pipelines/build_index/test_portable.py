"""The build through Beam's portable job service: the submission path of Flink and Spark job servers."""

import subprocess
import sys
import time

import pytest

from pipelines.build_index import job as build_index
from tests.helpers import data_files

FLAGS = ['--chunk_size', '64', '--num_shards', '2']


@pytest.fixture
def job_endpoint(tmp_path):
    """A local job service on a free port (the OS picks it), stopped after the test."""
    port_file = tmp_path / 'job_service.port'
    server = subprocess.Popen(
        [sys.executable, '-m', 'apache_beam.runners.portability.local_job_service_main',
         '--port', '0', '--port_file', str(port_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (port_file.exists() and port_file.read_text().strip()):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f'the job service did not start (exit code {server.poll()})')
            time.sleep(0.2)
        yield f'localhost:{port_file.read_text().strip()}'
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_portable_runner_writes_the_direct_runners_bytes(corpus_dir, job_endpoint, tmp_path):
    root, _ = corpus_dir
    direct = build_index.run(['--input', str(root), '--output', str(tmp_path / 'direct'), *FLAGS])
    portable = build_index.run([
        '--input', str(root), '--output', str(tmp_path / 'portable'), *FLAGS,
        '--runner', 'PortableRunner', '--job_endpoint', job_endpoint, '--environment_type', 'LOOPBACK'])
    files = data_files(tmp_path / 'direct')
    assert 'chunks/part-00001-of-00002.parquet' in files and 'index/index.faiss' in files
    assert data_files(tmp_path / 'portable') == files
    # The job service reports the counters the manifest is made of.
    assert portable['counts'] == direct['counts'] and portable['counts']['chunks'] > 0
