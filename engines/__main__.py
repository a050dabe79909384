"""`python -m engines fetch|start|stop`: one way to get, start and stop a local Flink or Spark cluster.

  python -m engines fetch flink spark        # Beam's job servers from Maven Central
  python -m engines start flink --dir /tmp/flink   # prints the flags a build needs
  ragsieve build --input ... --output ... $(cat /tmp/flink/build_flags)
  python -m engines stop --dir /tmp/flink
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Optional, Sequence

from engines import fetch, flink, processes, spark

STATE_FILE = 'cluster.json'
FLAGS_FILE = 'build_flags'


def start(engine: str, directory: Path, size: Optional[int]) -> dict:
    """Starts a cluster whose daemons outlive this command; returns what `stop` needs."""
    if engine == 'flink':
        cluster = flink.FlinkCluster(directory, flink.FlinkSettings(**({'taskmanagers': size} if size else {})))
    else:
        cluster = spark.SparkCluster(directory, spark.SparkSettings(**({'workers': size} if size else {})))
    ui = cluster.rest if engine == 'flink' else cluster.ui
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    state = {'engine': engine, 'ui': ui, 'build_flags': cluster.build_flags(),
             'pids': {name: p.pid for name, p in cluster.daemons.items()}, 'logs': {k: str(v) for k, v in cluster.logs.items()}}
    (directory / STATE_FILE).write_text(json.dumps(state, indent=1))
    (directory / FLAGS_FILE).write_text(' '.join(state['build_flags']) + '\n')
    return state


def stop(directory: Path) -> list[str]:
    """Stops the daemons `start` recorded under `directory` (their process groups); returns their names."""
    state = json.loads((directory / STATE_FILE).read_text())
    stopped = []
    for name, pid in reversed(list(state['pids'].items())):
        try:
            os.killpg(pid, signal.SIGTERM)
            stopped.append(name)
        except ProcessLookupError:
            pass
    (directory / STATE_FILE).unlink()
    return stopped


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m engines', description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest='command', required=True)
    get = commands.add_parser('fetch', help="Resolve the engines' Beam job servers with Maven.")
    get.add_argument('engines', nargs='+', choices=sorted(fetch.ENGINES))
    up = commands.add_parser('start', help='Start a cluster on free 127.0.0.1 ports.')
    up.add_argument('engine', choices=sorted(fetch.ENGINES))
    up.add_argument('--dir', type=Path, required=True, help='Where its configuration, logs and state go.')
    up.add_argument('--size', type=int, help='TaskManagers (Flink, default 2) or workers (Spark, default 1 of 2 cores).')
    down = commands.add_parser('stop', help='Stop the cluster started with --dir.')
    down.add_argument('--dir', type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == 'fetch':
            for name in args.engines:
                print(f'{name}: {fetch.fetch(fetch.ENGINES[name])}')
        elif args.command == 'start':
            args.dir.mkdir(parents=True, exist_ok=True)
            state = start(args.engine, args.dir, args.size)
            print(f"{args.engine} is up ({state['ui']}); build with: {' '.join(state['build_flags'])}")
        else:
            print('stopped ' + ', '.join(stop(args.dir)))
    except (fetch.EngineMissing, processes.EngineFailed, FileNotFoundError) as e:
        print(f'python -m engines {args.command}: error: {e}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
