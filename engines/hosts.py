"""Simulated hosts on this machine that share nothing: Linux network, mount and UTS namespaces joined by a bridge.

Each host is a network namespace with one interface (`eth0`, an address on
10.47.0.0/24) whose veth peer sits on a bridge in a namespace of its own, so
no address, route or interface is added outside the hosts. Every process
on a host runs in a mount namespace where /tmp and HOME are that host's
own directories (its disk), /etc/hosts names every host, and its hostname
is the host's name. The program files (the venv, the Python it was made
from, the checkout, the engines' cache) stay visible at their own paths,
as a machine image would put them on every host; nothing else of this
machine's /tmp or HOME is.

A host's mounts live as long as its processes: `Hosts.stop` kills every
process in each namespace, then deletes the namespaces, which takes their
interfaces with them. Namespaces are named `rsv<PID>-<N>-<host>` after the
process that made them and its Nth harness (one process may hold several:
a test's beside the session's), `rsvd<hash>-<host>` for `python -m engines
hosts`, which outlives its command; a harness that starts first deletes
those whose process is gone, which a killed test run leaves behind.

Needs root and iproute2's `ip netns` (`available` says why not). Imports
only the standard library: `enter`, run by `python -I` inside a host, must
not need the checkout on sys.path.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

SUBNET = '10.47.0'
INTERFACE = 'eth0'
SWITCH = 'switch'
STATE_FILE = 'hosts.json'
_NAME = re.compile(r'^rsv(\d+)-')
_MADE = itertools.count()  # this process's harnesses, for distinct names
_HOST = re.compile(r'^[a-z][a-z0-9-]{0,30}$')
# What a process may keep of the caller's environment inside a host.
KEPT_ENV = ('PATH', 'LANG', 'LC_ALL', 'JAVA_HOME', 'TZ')


class HostsUnavailable(RuntimeError):
    """This machine cannot make simulated hosts (not root, no `ip netns`); the message says which."""


def available() -> Optional[str]:
    """Why hosts cannot be made here, or None when they can."""
    if not sys.platform.startswith('linux'):
        return f'simulated hosts need Linux namespaces, not {sys.platform}'
    if os.geteuid() != 0:
        return 'simulated hosts need root (network and mount namespaces); run as root, as CI does'
    for tool in ('ip', 'mount'):
        if not shutil.which(tool):
            return f'simulated hosts need `{tool}` (Debian: apt-get install iproute2 mount)'
    done = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True)
    if done.returncode:
        return f'`ip netns` does not work here: {done.stderr.strip()[:200]}'
    return None


@dataclasses.dataclass(frozen=True)
class Host:
    """One simulated host.

    Attributes:
      name: Its hostname, which every host's /etc/hosts resolves.
      address: Its one address, reachable from the other hosts only.
      namespace: Its network namespace's name.
      disk: Its private /tmp and HOME, as directories of this machine.
    """

    name: str
    address: str
    namespace: str
    disk: Path

    @property
    def tmp(self) -> Path:
        return self.disk / 'tmp'

    @property
    def home(self) -> Path:
        return self.disk / 'home'

    def outside(self, inside: str) -> Path:
        """Where a path under the host's /tmp lies on this machine (to read a host's logs from here)."""
        relative = Path(inside).relative_to('/tmp')
        return self.tmp / relative


def image_paths() -> list[str]:
    """The program files every host sees: the venv, its Python, the checkout, the engines' cache."""
    checkout = Path(__file__).resolve().parent.parent
    cache = Path(os.environ.get('RAGSIEVE_ENGINES_HOME') or Path.home() / '.cache' / 'ragsieve' / 'engines')
    paths = {sys.prefix, sys.base_prefix, str(checkout), str(cache)}
    return sorted(os.path.realpath(p) for p in paths if os.path.isdir(p))


class Hosts:
    """Simulated hosts under `directory`; a context manager that removes them.

    Args:
      directory: Where each host's disk goes (`directory/NAME`).
      names: The hosts, in address order (10.47.0.2, .3, ...).
      owner: Who the namespaces belong to: this process (swept once it is
        gone) or, for a harness that outlives its command, None.
    """

    def __init__(self, directory: Path, names: Sequence[str], owner: Optional[int] = -1):
        bad = [n for n in names if not _HOST.match(n)]
        if bad or len(set(names)) != len(names) or not names:
            raise ValueError(f'host names {list(names)}: distinct, lowercase letters, digits and dashes')
        self.directory = Path(directory).resolve()
        self.owner = os.getpid() if owner == -1 else owner
        prefix = (f'rsv{self.owner}-{next(_MADE)}' if self.owner is not None else
                  f'rsvd{hashlib.sha256(str(self.directory).encode()).hexdigest()[:8]}')
        self.switch = f'{prefix}-{SWITCH}'
        self.hosts = {name: Host(name, f'{SUBNET}.{i + 2}', f'{prefix}-{name}', self.directory / name)
                      for i, name in enumerate(names)}
        self.image = image_paths()
        self.hidden: dict[str, list[str]] = {}

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def start(self) -> 'Hosts':
        """Makes the bridge and the hosts; removes a killed run's leftovers first."""
        sweep()
        etc_hosts = ''.join(f'{h.address}\t{h.name}\n' for h in self.hosts.values())
        _ip('netns', 'add', self.switch)
        _ip('-n', self.switch, 'link', 'add', 'bridge', 'type', 'bridge')
        _ip('-n', self.switch, 'link', 'set', 'bridge', 'up')
        for i, host in enumerate(self.hosts.values()):
            for d in (host.tmp, host.home, host.disk / 'etc'):
                d.mkdir(parents=True, exist_ok=True)
            os.chmod(host.tmp, 0o1777)
            (host.disk / 'etc' / 'hosts').write_text(f'127.0.0.1\tlocalhost\n{etc_hosts}')
            (host.disk / 'etc' / 'hostname').write_text(f'{host.name}\n')
            _ip('netns', 'add', host.namespace)
            _ip('link', 'add', INTERFACE, 'netns', host.namespace, 'type', 'veth', 'peer', 'name', f'port{i}',
                'netns', self.switch)
            _ip('-n', self.switch, 'link', 'set', f'port{i}', 'master', 'bridge', 'up')
            _ip('-n', host.namespace, 'addr', 'add', f'{host.address}/24', 'dev', INTERFACE)
            _ip('-n', host.namespace, 'link', 'set', INTERFACE, 'up')
            _ip('-n', host.namespace, 'link', 'set', 'lo', 'up')
        self.write_state()
        return self

    def write_state(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / STATE_FILE).write_text(json.dumps({
            'switch': self.switch, 'image': self.image,
            'hosts': {h.name: {'address': h.address, 'namespace': h.namespace, 'disk': str(h.disk)}
                      for h in self.hosts.values()}}, indent=1))

    def hide(self, host: str, path: str) -> None:
        """Processes started on `host` from now on find `path` (a directory of the image) empty: a host whose
        install differs."""
        self.hidden.setdefault(host, []).append(os.path.realpath(path))

    def command(self, host: str, argv: Sequence[str], cwd: str = '/tmp') -> list[str]:
        """`argv` as run on `host`: in its network namespace, with its own /tmp, HOME, /etc/hosts and hostname."""
        h = self.hosts[host]
        images = [a for p in self.image for a in ('--image', p)]
        hidden = [a for p in self.hidden.get(host, []) for a in ('--hide', p)]
        return ['ip', 'netns', 'exec', h.namespace, sys.executable, '-I', str(Path(__file__).resolve()), 'enter',
                '--name', h.name, '--disk', str(h.disk), '--cwd', cwd, *images, *hidden, '--', *argv]

    def environment(self, env: Optional[dict]) -> dict:
        """A host's processes' environment: PATH (the install's first) and the locale of this one, HOME, and `env`."""
        kept = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
        # The install's commands first on PATH (python, ragsieve), as on a machine image made for it.
        path = os.pathsep.join([os.path.join(sys.prefix, 'bin'), kept.get('PATH', os.defpath)])
        return {**kept, 'PATH': path, 'HOME': str(Path.home()), **(env or {})}

    def popen(self, host: str, argv: Sequence[str], log: Path, env: Optional[dict] = None,
              cwd: str = '/tmp') -> subprocess.Popen:
        """Starts `argv` on `host` in a process group of its own, its output appended to `log` (a path here)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, 'ab') as out:
            return subprocess.Popen(self.command(host, argv, cwd), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.environment(env), start_new_session=True)

    def run(self, host: str, argv: Sequence[str], env: Optional[dict] = None, cwd: str = '/tmp',
            timeout: Optional[float] = None, **kwargs) -> subprocess.CompletedProcess:
        """Runs `argv` on `host` to its end; output captured as text unless `kwargs` say otherwise."""
        kwargs = {'capture_output': True, 'text': True, **kwargs}
        return subprocess.run(self.command(host, argv, cwd), env=self.environment(env), timeout=timeout, **kwargs)

    def cut(self, host: str) -> None:
        """The host is lost: its link goes down and every process on it is killed (SIGKILL)."""
        _ip('-n', self.hosts[host].namespace, 'link', 'set', INTERFACE, 'down')
        kill_namespace(self.hosts[host].namespace)

    def mend(self, host: str) -> None:
        """A cut host's link comes back up (its processes do not: start them again)."""
        _ip('-n', self.hosts[host].namespace, 'link', 'set', INTERFACE, 'up')

    def pids(self, host: str) -> list[int]:
        """The processes running on `host`."""
        return namespace_pids(self.hosts[host].namespace)

    def stop(self) -> None:
        """Kills every process on every host, then deletes the namespaces (and so their interfaces)."""
        remove([h.namespace for h in self.hosts.values()] + [self.switch])

    def __enter__(self) -> 'Hosts':
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _ip(*args: str) -> str:
    done = subprocess.run(['ip', *args], capture_output=True, text=True)
    if done.returncode:
        raise HostsUnavailable(f'ip {" ".join(args)}: {done.stderr.strip()}')
    return done.stdout


def namespaces() -> list[str]:
    """The names of this machine's network namespaces (`ip netns list`)."""
    done = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def namespace_pids(namespace: str) -> list[int]:
    done = subprocess.run(['ip', 'netns', 'pids', namespace], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


def kill_namespace(namespace: str, timeout: float = 30) -> None:
    """SIGKILLs every process in `namespace` until none is left (a child may fork while its parent dies)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = namespace_pids(namespace)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise HostsUnavailable(f'processes {pids} in namespace {namespace} outlived SIGKILL for {timeout:.0f} s')
        time.sleep(0.1)


def remove(names: Sequence[str]) -> None:
    """Kills the processes of the namespaces `names` that exist, then deletes them."""
    present = set(namespaces())
    for name in names:
        if name in present:
            kill_namespace(name)
    for name in names:
        if name in present:
            _ip('netns', 'delete', name)


def sweep() -> list[str]:
    """Removes the namespaces of harnesses whose process is gone; returns their names."""
    stale = [n for n in namespaces() if (m := _NAME.match(n)) and not Path(f'/proc/{m.group(1)}').exists()]
    remove(stale)
    return stale


# Linux's mount(2) and unshare(2) flags; Python 3.11's os has neither call.
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
CLONE_NEWUTS, CLONE_NEWNET = 0x04000000, 0x40000000


def _libc_call(name: str, *args) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f'{name}{args}: {os.strerror(errno)}')


def _bind(source: str, target: str) -> None:
    _libc_call('mount', source.encode(), target.encode(), None, MS_BIND | MS_REC, None)


def enter(name: str, disk: Path, images: Sequence[str], cwd: str, argv: Sequence[str],
          hide: Sequence[str] = ()) -> None:
    """Inside a host's network namespace (`ip netns exec` gave this process a mount namespace of its own):
    mounts the host's /tmp, HOME and /etc/hosts, puts the image back, names the host, then runs `argv`."""
    home = os.environ.get('HOME') or '/root'
    _libc_call('mount', None, b'/', None, MS_REC | MS_PRIVATE, None)
    # Every source is opened before the first mount: /tmp's may hide the others (the disk itself may be in /tmp).
    hidden = [p for p in images if any(p == top or p.startswith(top.rstrip('/') + '/') for top in ('/tmp', home))]
    sources = [(str(disk / 'tmp'), '/tmp'), (str(disk / 'home'), home), (str(disk / 'etc' / 'hosts'), '/etc/hosts'),
               (str(disk / 'etc' / 'hostname'), '/etc/hostname'),
               *sorted((p, p) for p in hidden)]
    opened = [(os.open(source, os.O_PATH), target) for source, target in sources]
    for fd, target in opened:
        if target in hidden:
            os.makedirs(target, exist_ok=True)  # on the host's own disk: the image's mount point
        _bind(f'/proc/self/fd/{fd}', target)
        os.close(fd)
    for path in hide:
        os.makedirs('/tmp/.hidden-image', exist_ok=True)
        _bind('/tmp/.hidden-image', path)
    _libc_call('unshare', CLONE_NEWUTS)
    socket.sethostname(name)
    os.chdir(cwd)
    os.execvp(argv[0], list(argv))


def call_in(namespace: str, function: Callable, *args):
    """Runs `function(*args)` in a new thread that joined the network namespace `namespace`; its result.

    A thread's network namespace is its own (setns(2) moves the calling
    thread only), so this process's other threads stay where they were; the
    thread's sockets are the host's (names resolve as this machine's, not the
    host's /etc/hosts: use addresses).
    """
    result: dict = {}

    def run() -> None:
        try:
            fd = os.open(f'/run/netns/{namespace}', os.O_RDONLY)
            try:
                _libc_call('setns', fd, CLONE_NEWNET)
            finally:
                os.close(fd)
            result['value'] = function(*args)
        except BaseException as e:  # handed to the caller
            result['error'] = e

    thread = threading.Thread(target=run, name=f'in-{namespace}')
    thread.start()
    thread.join()
    if 'error' in result:
        raise result['error']
    return result['value']

def _main(argv: Sequence[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog='engines/hosts.py')
    commands = parser.add_subparsers(dest='command', required=True)
    inside = commands.add_parser('enter', help='(run by Hosts.command) become a host, then run a command')
    inside.add_argument('--name', required=True)
    inside.add_argument('--disk', type=Path, required=True)
    inside.add_argument('--cwd', default='/tmp')
    inside.add_argument('--image', action='append', default=[])
    inside.add_argument('--hide', action='append', default=[])
    inside.add_argument('argv', nargs='+')
    args = parser.parse_args(argv)
    try:
        enter(args.name, args.disk, args.image, args.cwd, args.argv, args.hide)
    except OSError as e:
        print(f'host {args.name}: cannot run {args.argv[0]}: {e}', file=sys.stderr)
        raise SystemExit(127)


if __name__ == '__main__':
    _main(sys.argv[1:])
