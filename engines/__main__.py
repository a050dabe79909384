"""`python -m engines fetch|start|stop`: one way to get, start and stop a local Flink or Spark cluster.

  python -m engines fetch flink spark        # Beam's job servers from Maven Central
  python -m engines start flink --dir /tmp/flink   # prints the flags a build needs
  ragsieve build --input ... --output ... $(cat /tmp/flink/build_flags)
  python -m engines stop --dir /tmp/flink

  python -m engines hosts start --dir /tmp/cluster   # Flink and MinIO on simulated hosts (root)
  python -m engines hosts run --dir /tmp/cluster launcher -- python -m pipelines.cli build ...
  python -m engines hosts stop --dir /tmp/cluster
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import sys
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

from engines import fetch, flink, processes, spark, state

# Kept for callers that named them here.
STATE_FILE, FLAGS_FILE = state.STATE_FILE, state.FLAGS_FILE
# Held while `start` runs: two starts on one directory at once would both find it free.
START_LOCK = '.start.lock'
# How long `stop` waits for its daemons after SIGTERM before SIGKILL.
STOP_GRACE = 30


class Refused(ValueError):
    """What a command will not do, in one line (exit status 2)."""


def check_size(text: str) -> int:
    """`--size`: a whole number of TaskManagers or workers, at least 1."""
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r} is not a whole number') from None
    if size < 1:
        raise argparse.ArgumentTypeError(f'{size}: a cluster needs at least 1')
    return size


def check_dir(directory: Path) -> Path:
    """Makes `directory` if it is missing; refuses a file or a directory this user cannot write.

    Raises:
      Refused: Naming the path and why.
    """
    if directory.exists() and not directory.is_dir():
        raise Refused(f'--dir {directory}: a file, not a directory')
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Refused(f'--dir {directory}: cannot be made: {e.strerror}') from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise Refused(f'--dir {directory}: not writable by this user')
    return directory


@contextlib.contextmanager
def start_lock(directory: Path) -> Iterator[None]:
    with open(directory / START_LOCK, 'a') as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(f'--dir {directory}: another `python -m engines start` is starting a cluster there') from None
        yield


def start(engine: str, directory: Path, size: Optional[int]) -> dict:
    """Starts a cluster whose daemons outlive this command; returns what `stop` needs.

    A directory holds one cluster: a start refuses while the one recorded
    there runs, and replaces the record of one that stopped.

    Raises:
      Refused: While a cluster recorded in `directory` runs.
    """
    with start_lock(check_dir(directory)):
        before = state.read(directory)
        alive = state.running(before) if before else {}
        if alive:
            raise Refused(f'--dir {directory} holds a running cluster, {state.describe(before, alive)}: use it '
                          f'(its flags are in {directory / state.FLAGS_FILE}) or stop it first with '
                          f'`python -m engines stop --dir {directory}`')
        if engine == 'flink':
            cluster = flink.FlinkCluster(directory, flink.FlinkSettings(**({'taskmanagers': size} if size else {})))
        else:
            cluster = spark.SparkCluster(directory, spark.SparkSettings(**({'workers': size} if size else {})))
        ui = cluster.rest if engine == 'flink' else cluster.ui
        try:
            cluster.start()
            daemons = {name: state.identity(p.pid) for name, p in cluster.daemons.items()}
            if None in daemons.values():
                raise processes.EngineFailed(f'a daemon exited as the cluster started: see {directory / "log"}')
            record = {'engine': engine, 'ui': ui, 'build_flags': cluster.build_flags(), 'daemons': daemons,
                      'logs': {k: str(v) for k, v in cluster.logs.items()}}
            state.write(directory, record)
        except BaseException:
            cluster.stop()
            raise
    return record


def stop(directory: Path, grace: float = STOP_GRACE) -> list[str]:
    """Stops the daemons `start` recorded under `directory` that still run (their process groups).

    A daemon is signalled only while the process with its PID is still the
    one `start` recorded (`state.same_process`); SIGKILL follows SIGTERM
    after `grace` seconds. Returns the names of those it stopped.

    Raises:
      Refused: When no cluster is recorded there.
    """
    recorded = state.read(directory)
    if recorded is None:
        raise Refused(f'--dir {directory}: no cluster recorded there (no {state.STATE_FILE})')
    alive = state.running(recorded)
    for d in alive.values():
        signal_group(d['pid'], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and state.running({'daemons': alive}):
        time.sleep(0.2)
    for d in state.running({'daemons': alive}).values():
        signal_group(d['pid'], signal.SIGKILL)
    (directory / state.STATE_FILE).unlink()
    return list(alive)


def signal_group(pid: int, sig: int) -> None:
    """Signals the process group a daemon leads (`start_new_session`: the daemon and its children)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class OneLineParser(argparse.ArgumentParser):
    """Errors as one line and exit status 2, not the usage."""

    def error(self, message):
        self.exit(2, f'{self.prog}: error: {message}\n')


def hosts_command(args) -> int:
    """`python -m engines hosts start|run|stop`."""
    from engines import multihost

    if args.action == 'start':
        cluster = multihost.start_detached(check_dir(args.dir), args.size)
        (args.dir / state.FLAGS_FILE).write_text(' '.join(cluster.build_flags()) + '\n')
        (args.dir / multihost.PORTABLE_FLAGS_FILE).write_text(' '.join(cluster.portable_flags()) + '\n')
        addresses = ', '.join(f'{h.name} {h.address}' for h in cluster.hosts.hosts.values())
        print(f'hosts up ({addresses}); MinIO holds {multihost.SAMPLE_CORPUS}; on the launcher, build with: '
              f'$(cat {args.dir / state.FLAGS_FILE})')
        return 0
    if args.action == 'run':
        return multihost.run_detached(args.dir, args.host, args.argv)
    multihost.attached(args.dir).stop()
    print(f'removed the hosts under {args.dir}')
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = OneLineParser(prog='python -m engines', description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest='command', required=True)
    get = commands.add_parser('fetch', help="Resolve the engines' Beam job servers with Maven.")
    get.add_argument('engines', nargs='+', choices=sorted(fetch.ENGINES))
    up = commands.add_parser('start', help='Start a cluster on free 127.0.0.1 ports.')
    up.add_argument('engine', choices=sorted(fetch.ENGINES))
    up.add_argument('--dir', type=Path, required=True, help='Where its configuration, logs and state go.')
    up.add_argument('--size', type=check_size,
                    help='TaskManagers (Flink, default 2) or workers (Spark, default 1 of 2 cores); at least 1.')
    down = commands.add_parser('stop', help='Stop the cluster started with --dir.')
    down.add_argument('--dir', type=Path, required=True)
    several = commands.add_parser('hosts', help='A Flink cluster and MinIO on simulated hosts that share nothing.')
    action = several.add_subparsers(dest='action', required=True)
    several_up = action.add_parser('start', help='Make the hosts and start the daemons (needs root).')
    several_up.add_argument('--dir', type=Path, required=True, help="Where the hosts' disks go.")
    several_up.add_argument('--size', type=check_size, default=2, help='TaskManager hosts (default 2).')
    on = action.add_parser('run', help='Run a command on one host, in the checkout, with the store settings.')
    on.add_argument('--dir', type=Path, required=True)
    on.add_argument('host')
    on.add_argument('argv', nargs='+', metavar='-- COMMAND')
    several_down = action.add_parser('stop', help='Kill every process on the hosts and remove them.')
    several_down.add_argument('--dir', type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == 'hosts':
            return hosts_command(args)
        if args.command == 'fetch':
            for name in args.engines:
                print(f'{name}: {fetch.fetch(fetch.ENGINES[name])}')
        elif args.command == 'start':
            record = start(args.engine, args.dir, args.size)
            print(f"{args.engine} is up ({record['ui']}); build with: {' '.join(record['build_flags'])}")
        else:
            stopped = stop(args.dir)
            print('stopped ' + ', '.join(stopped) if stopped else 'none of its daemons was still running')
    except OSError as e:
        where = f'{e.filename}: ' if e.filename else ''
        print(f'python -m engines {args.command}: error: {where}{e.strerror or e}', file=sys.stderr)
        return 2
    except (fetch.EngineMissing, processes.EngineFailed, ValueError, RuntimeError) as e:
        print(f'python -m engines {args.command}: error: {e}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
