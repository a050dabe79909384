"""Simulated hosts (engines/hosts.py): real network, mount and UTS namespaces; what they share, what they leave.

Needs root and `ip netns` (CI has both); elsewhere the tests skip saying so,
and fail instead where CI requires the engines (RAGSIEVE_REQUIRE_ENGINES=1).
"""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engines import hosts
from tests.helpers import REPO, engine_missing


@pytest.fixture
def two_hosts(tmp_path):
    why = hosts.available()
    if why:
        engine_missing(why)
    with hosts.Hosts(tmp_path / 'hosts', ['alpha', 'beta']) as made:
        yield made


def ours(made) -> list[str]:
    return [n for n in hosts.namespaces() if n in [h.namespace for h in made.hosts.values()] + [made.switch]]


def test_hosts_reach_each_other_by_name_and_share_no_tmp_or_home(two_hosts, tmp_path):
    (tmp_path / 'on-this-machine').write_text('x')
    alpha = two_hosts.run('alpha', ['sh', '-c', 'hostname; echo a > /tmp/mine; echo a > "$HOME/mine"; ls /tmp'])
    assert alpha.returncode == 0, alpha.stderr
    # Its own /tmp: nothing of this machine's but the mount points of the image where it lies in /tmp (a checkout
    # there, as CI's clone is).
    image_tops = {Path(p).relative_to('/tmp').parts[0] for p in two_hosts.image if p.startswith('/tmp/')}
    listed = alpha.stdout.split()
    assert listed[0] == 'alpha' and set(listed[1:]) - image_tops == {'mine'}
    beta = two_hosts.run('beta', ['sh', '-c', f'hostname; ls /tmp "$HOME"; ls {tmp_path}'])
    assert beta.stdout.split()[0] == 'beta' and 'No such file' in beta.stderr  # this machine's tmp_path: not there
    assert 'mine' not in beta.stdout and 'on-this-machine' not in beta.stdout
    assert (two_hosts['alpha'].tmp / 'mine').read_text() == 'a\n'  # a host's disk, read from here
    server = two_hosts.popen('alpha', [sys.executable, '-m', 'http.server', '8000'], tmp_path / 'server.log')
    try:
        fetched = two_hosts.run('beta', [sys.executable, '-c', textwrap.dedent('''
            import time, urllib.request
            for _ in range(100):
                try:
                    print(urllib.request.urlopen('http://alpha:8000/mine').read().decode().strip()); break
                except OSError:
                    time.sleep(0.1)
            ''')])
        assert fetched.stdout.strip() == 'a', fetched.stderr  # by name, over the bridge; the program files: the image
        assert two_hosts.pids('alpha') == [server.pid]
    finally:
        server.kill()


def test_a_cut_host_loses_its_processes_and_its_link(two_hosts, tmp_path):
    sleeper = two_hosts.popen('alpha', ['sleep', '600'], tmp_path / 'sleep.log')
    two_hosts.cut('alpha')
    assert sleeper.wait(timeout=30) == -signal.SIGKILL
    assert two_hosts.pids('alpha') == []
    ping = two_hosts.run('beta', [sys.executable, '-c', 'import socket; socket.create_connection(("alpha", 22), 2)'])
    assert ping.returncode and any(why in ping.stderr for why in ('unreachable', 'timed out', 'No route to host')), \
        ping.stderr


def test_stop_leaves_no_namespace_process_or_interface_even_when_the_test_fails(tmp_path):
    why = hosts.available()
    if why:
        engine_missing(why)
    links = subprocess.run(['ip', '-o', 'link'], capture_output=True, text=True).stdout
    made = hosts.Hosts(tmp_path / 'hosts', ['alpha', 'beta'])
    sleepers = []
    with pytest.raises(RuntimeError, match='a failing test'):
        with made:
            sleepers = [made.popen(h, ['sleep', '600'], tmp_path / f'{h}.log') for h in ('alpha', 'beta')]
            assert len(ours(made)) == 3
            raise RuntimeError('a failing test')
    assert [s.wait(timeout=30) for s in sleepers] == [-signal.SIGKILL] * 2
    assert ours(made) == []
    assert subprocess.run(['ip', '-o', 'link'], capture_output=True, text=True).stdout == links
    mounts = open('/proc/self/mountinfo').read()
    assert not [n for n in [made.switch, *(h.namespace for h in made.hosts.values())] if n in mounts]


def test_a_killed_harness_is_swept_by_the_next_one(tmp_path):
    """A test run killed with SIGKILL leaves its namespaces and their processes; the next harness removes them."""
    why = hosts.available()
    if why:
        engine_missing(why)
    script = textwrap.dedent(f'''
        import os, signal, sys
        from pathlib import Path
        from engines import hosts
        made = hosts.Hosts(Path({str(tmp_path / 'killed')!r}), ['alpha']).start()
        made.popen('alpha', ['sleep', '600'], Path({str(tmp_path / 'sleep.log')!r}))
        print(made.switch, made['alpha'].namespace, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        ''')
    done = subprocess.run([sys.executable, '-c', script], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = done.stdout.split()
    assert set(left) <= set(hosts.namespaces()) and hosts.namespace_pids(left[1])
    assert sorted(hosts.sweep()) == sorted(left)
    assert not set(left) & set(hosts.namespaces())


def test_without_root_the_reason_says_so(monkeypatch):
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    assert 'need root' in hosts.available()


def test_host_names_are_checked():
    with pytest.raises(ValueError, match='distinct'):
        hosts.Hosts('/nonexistent', ['alpha', 'alpha'])
    with pytest.raises(ValueError, match='lowercase'):
        hosts.Hosts('/nonexistent', ['Alpha'])


def worked_example() -> list[str]:
    """The commands of docs/operations.md's worked example on simulated hosts, continuation lines joined."""
    text = (REPO / 'docs' / 'operations.md').read_text(encoding='utf-8')
    block = next(b for b in text.split('```sh\n')[1:] if 'engines hosts start' in b).split('```')[0]
    return [line for line in block.replace('\\\n', ' ').splitlines() if line.startswith('.venv/bin/python')]


def test_the_docs_worked_example_runs_as_written_and_starts_again_on_its_directory(tmp_path):
    """Start, the two builds (FlinkRunner, then the rebuild through the job server on `jobserver`), stop: the docs'
    commands as written, on a directory of the test's own; then `start` while up (one line) and again after stop."""
    from engines import multihost
    from engines.fetch import EngineMissing

    try:
        multihost.FlinkHosts(tmp_path / 'probe')  # not started: says what this machine lacks
    except (hosts.HostsUnavailable, EngineMissing) as e:
        engine_missing(str(e))
    directory = tmp_path / 'cluster'
    start, first, second, stop = [c.replace('/tmp/cluster', str(directory)) for c in worked_example()]

    def run(command):
        return subprocess.run(command, shell=True, cwd=REPO, capture_output=True, text=True, timeout=900)

    try:
        up = run(start)
        assert up.returncode == 0, up.stderr
        assert 'launcher 10.47.0.7' in up.stdout and '--flink_master jobmanager:8081' in (directory / 'build_flags').read_text()
        again = run(start)
        assert again.returncode == 2 and again.stderr.strip() == (
            f'python -m engines hosts: error: hosts are already up under {directory}: use them, or remove them '
            f'first with python -m engines hosts stop --dir {directory}')
        built, rebuilt = run(first), run(second)
        for done in (built, rebuilt):
            assert done.returncode == 0 and 'published' in done.stdout, done.stderr[-3000:]
        down = run(stop)
        assert down.returncode == 0, down.stderr
        # Back on the same directory: MinIO's data as it was (the bucket kept), no traceback.
        up = run(start)
        assert up.returncode == 0 and 'Traceback' not in up.stderr, up.stderr[-3000:]
        listed = run(f'.venv/bin/python -m engines hosts run --dir {directory} launcher -- python -c '
                     '"from transforms import storage; print(len(storage.list_files(\'s3://ragsieve/index\')) > 0)"')
        assert listed.stdout.split() == ['True'], listed.stderr[-2000:]
    finally:
        down = run(stop)
    assert down.returncode == 0, down.stderr
    assert not [n for n in hosts.namespaces() if n.startswith(multihost.attached(directory).switch.split('-')[0])]
