"""`ragsieve-sdk-worker`: starts a Beam Python SDK worker for an engine's PROCESS environment, without Docker.

An engine (Flink's or Spark's Beam runner) runs a PROCESS environment's
command once per SDK worker with the container contract's flags (`--id`,
`--provision_endpoint`, `--control_endpoint`, ...), the same flags Beam's Go
boot binary takes in its SDK container. This is that boot for a worker that
runs in the same Python installation as the launcher (one machine, or hosts
with the same install): it asks the runner's provision service for the
pipeline options and endpoints, then runs Beam's own
`apache_beam.runners.worker.sdk_worker_main`. Staged artifacts are not
installed: ragsieve and its models are already installed here. So the
worker gets no scratch directory unless the runner names one: Beam's
worker only reads it (the staged artifacts, a pickled main session), and a
directory made per worker was left behind by each one (this process
becomes the worker: nothing of it runs after the worker exits).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence


def worker_environment(info, worker_id: str, flags: argparse.Namespace, base: dict) -> dict:
    """The environment `sdk_worker_main` reads, from the runner's provision info.

    Args:
      info: The runner's `ProvisionInfo`.
      worker_id: This worker's id, as the runner named it.
      flags: The container contract's flags (endpoints the info may omit).
      base: The environment to extend.
    """
    from apache_beam.portability.api import endpoints_pb2
    from google.protobuf import json_format, text_format

    def descriptor(url: str) -> str:
        return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=url))

    env = dict(base)
    env.update({
        'WORKER_ID': worker_id,
        'PIPELINE_OPTIONS': json_format.MessageToJson(info.pipeline_options),
        'CONTROL_API_SERVICE_DESCRIPTOR': descriptor(info.control_endpoint.url or flags.control_endpoint),
        'LOGGING_API_SERVICE_DESCRIPTOR': descriptor(info.logging_endpoint.url or flags.logging_endpoint),
        'RUNNER_CAPABILITIES': ' '.join(info.runner_capabilities),
    })
    if flags.semi_persistent_directory:
        env['SEMI_PERSISTENT_DIRECTORY'] = flags.semi_persistent_directory
    if info.status_endpoint.url:
        env['STATUS_API_SERVICE_DESCRIPTOR'] = descriptor(info.status_endpoint.url)
    return env


def provision_info(endpoint: str, worker_id: str):
    """Asks the runner's provision service for this worker's `ProvisionInfo`."""
    import grpc
    from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        return stub.GetProvisionInfo(beam_provision_api_pb2.GetProvisionInfoRequest(),
                                     metadata=[('worker_id', worker_id)], timeout=120).info


def parse_flags(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog='ragsieve-sdk-worker', description=__doc__.splitlines()[0])
    parser.add_argument('--id', required=True, help="The worker's id, as the runner names it.")
    parser.add_argument('--provision_endpoint', required=True, help="The runner's provision service.")
    for name in ('control', 'logging', 'artifact'):
        parser.add_argument(f'--{name}_endpoint', default='', help=f"The runner's {name} service.")
    parser.add_argument('--semi_persistent_directory', default='', help='Scratch directory of the worker.')
    flags, _ = parser.parse_known_args(argv)  # the contract may grow flags this boot does not need
    return flags


# Beam's worker, run as `python -m` runs it, once its gRPC pings are spaced as the Java runner allows
# (`third_party.calm_grpc_keepalive`).
WORKER_MAIN = ('from pipelines.common import third_party; third_party.calm_grpc_keepalive(); import runpy; '
               "runpy.run_module('apache_beam.runners.worker.sdk_worker_main', run_name='__main__', alter_sys=True)")


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Replaces this process with Beam's SDK worker (so the runner's kill reaches the worker itself)."""
    flags = parse_flags(sys.argv[1:] if argv is None else argv)
    env = worker_environment(provision_info(flags.provision_endpoint, flags.id), flags.id, flags, os.environ)
    os.execve(sys.executable, [sys.executable, '-c', WORKER_MAIN], env)


if __name__ == '__main__':
    main()
