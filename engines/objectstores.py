"""Object stores on this machine for tests and benchmarks: MinIO (S3) and fake-gcs-server (GCS), from Go.

Both are built from the Go module proxy with `go install` (MinIO ~7 min on
2 cores, fake-gcs-server ~2 min) into the engines' cache (`fetch.home()`),
one binary per version, so only a fresh machine pays for the build. Each
server starts on a free 127.0.0.1 port with its data in a directory of its
own and is stopped with its process group, as the clusters are.

fake-gcs-server 1.56.1 answers a batch request whose parts carry no
`Content-ID` (what google-cloud-storage 3.x sends, e.g. for Beam's batch
delete) with an empty body ("Bad response: not multi-part"). `BatchFix`, a
small proxy in front of it, numbers the parts before forwarding: the
emulator's fault is mended here, never in ragsieve's own code for GCS.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import os
import re
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Optional

from engines import fetch, processes


@dataclasses.dataclass(frozen=True)
class GoServer:
    """A server built with `go install module@version`: its binary's name in the cache."""

    name: str
    module: str
    version: str

    @property
    def binary(self) -> Path:
        return fetch.home() / 'bin' / f'{self.name}-{self.version}'


MINIO = GoServer('minio', 'github.com/minio/minio', 'v0.0.0-20260212201848-7aac2a2c5b7c')
FAKE_GCS = GoServer('fake-gcs-server', 'github.com/fsouza/fake-gcs-server', 'v1.56.1')
SERVERS = {s.name: s for s in (MINIO, FAKE_GCS)}

# MinIO's root account on a throw-away server (secrets of no one).
MINIO_USER, MINIO_PASSWORD = 'ragsieve', 'ragsieve-test-secret'


def binary(server: GoServer) -> Path:
    """The server's built binary.

    Raises:
      fetch.EngineMissing: If it was not built yet, saying how to build it.
    """
    if not server.binary.is_file():
        raise fetch.EngineMissing(
            f'{server.name} is not built: run `make objectstores` (python -m engines fetch {server.name}; '
            f'needs Go and the Go module proxy)')
    return server.binary


def build(server: GoServer) -> Path:
    """Builds the server with `go install` into the cache, unless it is there; returns the binary.

    Raises:
      fetch.EngineMissing: Without Go, or when the build fails (its output's tail).
    """
    if server.binary.is_file():
        return server.binary
    go = shutil.which('go')
    if not go:
        raise fetch.EngineMissing(f'no go on PATH: install Go 1.24 or newer to build {server.name}')
    staging = server.binary.parent / f'.{server.name}-{os.getpid()}'
    staging.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([go, 'install', f'{server.module}@{server.version}'], capture_output=True, text=True,
                              env={**os.environ, 'GOBIN': str(staging)})
        if done.returncode:
            raise fetch.EngineMissing(f'go install {server.module}@{server.version} failed: '
                                      f'{done.stderr.strip()[-500:]}')
        os.replace(staging / Path(server.module).name, server.binary)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return server.binary


def http_ready(url: str) -> bool:
    """Whether an HTTP server answers at `url` (any status below 500)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status < 500
    except OSError:
        return False


class MinioServer:
    """MinIO on a free port, data under `directory`; `env` is what an S3 client needs to reach it."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.port, self.console = processes.free_port(), processes.free_port()
        self.endpoint = f'http://127.0.0.1:{self.port}'
        self.log = self.directory / 'minio.log'
        self.process: Optional[subprocess.Popen] = None

    @property
    def env(self) -> dict:
        return {'AWS_ACCESS_KEY_ID': MINIO_USER, 'AWS_SECRET_ACCESS_KEY': MINIO_PASSWORD,
                'AWS_REGION': 'us-east-1', 'AWS_ENDPOINT_URL_S3': self.endpoint}

    def start(self, timeout: float = 60) -> 'MinioServer':
        if not fetch.installed('boto3'):
            raise fetch.EngineMissing("boto3 is not installed: pip install 'ragsieve[s3]'")
        command = [str(binary(MINIO)), 'server', str(self.directory / 'data'), '--quiet',
                   '--address', f'127.0.0.1:{self.port}', '--console-address', f'127.0.0.1:{self.console}']
        self.process = processes.start(command, self.log, {
            'MINIO_ROOT_USER': MINIO_USER, 'MINIO_ROOT_PASSWORD': MINIO_PASSWORD, 'MINIO_BROWSER': 'off'})
        processes.wait_until(lambda: http_ready(f'{self.endpoint}/minio/health/ready'), {'minio': self.process},
                             {'minio': self.log}, timeout, 'MinIO answering')
        return self

    def make_bucket(self, name: str) -> None:
        import boto3

        boto3.client('s3', endpoint_url=self.endpoint, aws_access_key_id=MINIO_USER,
                     aws_secret_access_key=MINIO_PASSWORD, region_name='us-east-1').create_bucket(Bucket=name)

    def stop(self) -> None:
        if self.process:
            processes.stop(self.process, grace=10)


class FakeGcsServer:
    """fake-gcs-server (in memory) behind `BatchFix`; `env` points google-cloud-storage at the proxy."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.port = processes.free_port()
        self.log = self.directory / 'fake-gcs-server.log'
        self.process: Optional[subprocess.Popen] = None
        self.proxy: Optional[BatchFix] = None

    @property
    def endpoint(self) -> str:
        return f'http://127.0.0.1:{self.proxy.port}'

    @property
    def env(self) -> dict:
        return {'STORAGE_EMULATOR_HOST': self.endpoint, 'GOOGLE_CLOUD_PROJECT': 'ragsieve-test'}

    def start(self, timeout: float = 60) -> 'FakeGcsServer':
        if not fetch.installed('google.cloud.storage'):
            raise fetch.EngineMissing("google-cloud-storage is not installed: pip install 'ragsieve[gcs]'")
        self.proxy = BatchFix(self.port)
        # Uploads answer with URLs of external-url: the proxy's, so that resumable uploads pass through it too.
        command = [str(binary(FAKE_GCS)), '-scheme', 'http', '-host', '127.0.0.1', '-port', str(self.port),
                   '-backend', 'memory', '-log-level', 'warn', '-external-url', self.endpoint,
                   '-public-host', f'127.0.0.1:{self.proxy.port}']
        self.process = processes.start(command, self.log)
        processes.wait_until(lambda: http_ready(f'http://127.0.0.1:{self.port}/storage/v1/b'),
                             {'fake-gcs-server': self.process}, {'fake-gcs-server': self.log}, timeout,
                             'fake-gcs-server answering')
        return self

    def make_bucket(self, name: str) -> None:
        request = urllib.request.Request(f'http://127.0.0.1:{self.port}/storage/v1/b?project=ragsieve-test',
                                         data=('{"name": "%s"}' % name).encode(), method='POST',
                                         headers={'Content-Type': 'application/json'})
        urllib.request.urlopen(request, timeout=10).close()

    def stop(self) -> None:
        if self.proxy:
            self.proxy.close()
        if self.process:
            processes.stop(self.process, grace=10)


# A part's opening lines (google-cloud-storage ends them with a bare \n), unless a Content-ID follows.
_PART_HEADERS = re.compile(rb'(--[^\r\n]+(\r?\n)Content-Type: application/http\r?\n)(?!Content-ID)')


def number_batch_parts(body: bytes) -> bytes:
    """A batch request's body with a `Content-ID` header on every part that has none."""
    count = iter(range(1, 1 << 30))
    return _PART_HEADERS.sub(lambda m: m.group(1) + b'Content-ID: <%d>' % next(count) + m.group(2), body)


class BatchFix:
    """A forwarding HTTP proxy on a free port that numbers the parts of batch requests (see the module)."""

    def __init__(self, target_port: int):
        target = target_port

        class Forward(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def _forward(self):
                body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
                if self.path.startswith('/batch/'):
                    body = number_batch_parts(body)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ('content-length', 'host')}
                connection = http.client.HTTPConnection('127.0.0.1', target, timeout=60)
                try:
                    connection.request(self.command, self.path, body=body, headers=headers)
                    answer = connection.getresponse()
                    data = answer.read()
                finally:
                    connection.close()
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in ('content-length', 'transfer-encoding', 'connection'):
                        self.send_header(key, value)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Forward)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main(argv=None) -> int:
    """`python -m engines.objectstores fetch [minio] [fake-gcs-server]`: builds the servers into the cache."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog='python -m engines.objectstores', description=main.__doc__.split(':')[0])
    commands = parser.add_subparsers(dest='command', required=True)
    get = commands.add_parser('fetch', help='Build the servers with go install (once per version).')
    # No `choices`: argparse checks an empty `*` list against them too (Python 3.11).
    get.add_argument('servers', nargs='*', help=f'Of {", ".join(sorted(SERVERS))}; both by default.')
    args = parser.parse_args(argv)
    unknown = sorted(set(args.servers) - set(SERVERS))
    if unknown:
        parser.error(f'unknown servers {unknown} (choose from {", ".join(sorted(SERVERS))})')
    try:
        for name in args.servers or sorted(SERVERS):
            print(f'{name}: {build(SERVERS[name])}', flush=True)
    except fetch.EngineMissing as e:
        print(f'python -m engines.objectstores: {e}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
