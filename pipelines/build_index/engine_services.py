"""The services a build's job on an engine depends on, by role and address, and the first that no longer answers.

An engine reports a lost host as Java sees it (`java.net.NoRouteToHostException:
No route to host`), naming neither the host nor what ran there. The build's
flags name both: the job server (`--job_endpoint`), Flink's JobManager
(`--flink_master`), Spark's master (`--spark_master_url`) and an S3-compatible
store (`--s3_endpoint_url`, `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`). So when
a job fails, stalls or loses its job service, the launcher tries each once (a
TCP connection of at most `engine_job.PROBE_SECONDS`), and the build's line leads with the
first that does not answer (`silent_line`): `the Flink JobManager at
jobmanager:8081 (--flink_master) does not answer`. A TaskManager is named by
Flink itself, in its exception history (`flink_rest_api.failure_line`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Mapping, Optional
from urllib.parse import urlsplit

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.build_index import engine_job

# Where an S3 client finds an S3-compatible store when no flag names it (botocore's order).
STORE_ENDPOINT_ENV = ('AWS_ENDPOINT_URL_S3', 'AWS_ENDPOINT_URL')


@dataclasses.dataclass(frozen=True)
class Service:
    """One service the job depends on: `role` at `host:port`, named by `flag`."""

    role: str
    host: str
    port: int
    flag: str

    def __str__(self) -> str:
        return f'the {self.role} at {self.host}:{self.port} ({self.flag})'


def services(options: PipelineOptions, environ: Mapping[str, str] = os.environ) -> list[Service]:
    """The services a build's job depends on, as its flags and environment name them, in the order a lost one
    stops the job first: the job server, the engine's master, the object store."""
    values = options.get_all_options()
    found = []
    kind = engine_job.engine(options)
    if kind == 'portable':
        found.append(_service('Beam job server', '--job_endpoint', values.get('job_endpoint')))
    flink = engine_job.flink_master(options)
    if flink:
        found.append(Service('Flink JobManager', flink[1], flink[2], flink[0]))
    if kind == 'spark':
        found.append(_service('Spark master', '--spark_master_url', values.get('spark_master_url')))
    store_flag = '--s3_endpoint_url'
    endpoint = values.get('s3_endpoint_url')
    if not endpoint:
        store_flag, endpoint = next(((name, environ[name]) for name in STORE_ENDPOINT_ENV if environ.get(name)),
                                    (store_flag, None))
    found.append(_service('object store', store_flag, endpoint))
    return [s for s in found if s is not None]


def _service(role: str, flag: str, address: Optional[str]) -> Optional[Service]:
    parsed = engine_job.parse_master(flag, address)
    if parsed is None and address and '://' in address:  # a store's URL without a port: its scheme's
        parts = urlsplit(address)
        default = {'http': 80, 'https': 443}.get(parts.scheme)
        parsed = (flag, parts.hostname, default) if parts.hostname and default else None
    return Service(role, parsed[1], parsed[2], flag) if parsed else None


def answers(service: Service, timeout: float = engine_job.PROBE_SECONDS) -> bool:
    """Whether `service` accepts a TCP connection within `timeout` seconds."""
    return engine_job.answers(service.host, service.port, timeout)


def silent(found: list[Service], answer: Callable[[Service], bool] = answers) -> Optional[Service]:
    """The first of `found` that does not answer; None when all do."""
    return next((s for s in found if not answer(s)), None)


def silent_line(options: PipelineOptions, answer: Callable[[Service], bool] = answers) -> Optional[str]:
    """`the Flink JobManager at jobmanager:8081 (--flink_master) does not answer`, for the first of the job's
    services that does not; None when all answer."""
    lost = silent(services(options), answer)
    return f'{lost} does not answer' if lost else None
