"""The engine job of a killed build: recorded in the root's lease while it runs, cancelled by the next build.

A build killed by SIGKILL (the kernel's OOM killer, a scheduler's timeout)
takes its job server with it (`job_server_java`), and a Spark job with that
(Beam's Spark job server is its driver); a Flink job runs in the cluster and
would run on, writing a run and cache entries nobody publishes, some of them
after the next build cleaned up the root. So a build on a remote root records
its Flink job in the root's lease before the job starts (`record`: Flink's
REST API and the job's name), and the next build, taking over the expired
lease, cancels that job through the same API and waits until Flink has
ended it (`cancel`), before it deletes what the killed build left.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional, Sequence

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from pipelines.build_index import engine_job, flink_rest_api
from transforms.storage import leases

LOG = logging.getLogger('ragsieve.build')

# How long the next build waits for Flink to end the killed build's job it cancelled: its tasks stop within
# seconds; a job still not ended after this is said, and the build goes on.
CANCEL_WAIT_SECONDS = 120.0


def job_record(options: PipelineOptions) -> Optional[dict]:
    """What the lease records of the build's job: Flink's REST API and the job's name; None off Flink (a Spark
    job ends with its job server, an embedded engine with the launcher)."""
    rest, name = engine_job.flink_rest(options), options.view_as(GoogleCloudOptions).job_name
    return {'engine': 'flink', 'rest': rest, 'name': name} if rest and name else None


def record(locks: Sequence, options: PipelineOptions) -> None:
    """Records the build's job in each lease it holds (locks on local paths have none), before the job starts.

    Raises:
      leases.Lost: When a lease was lost.
    """
    job = job_record(options)
    for lock in locks:
        if job and isinstance(lock, leases.Lease):
            lock.record(job)


def cancel(body: dict, clock: Callable[[], float] = time.monotonic, poll: float = 1.0,
           wait: float = CANCEL_WAIT_SECONDS) -> Optional[str]:
    """Cancels the job an expired lease's holder recorded, if it still runs, and waits until Flink ended it;
    returns what was done in words (also logged), None when the lease recorded no job.

    Flink that does not answer is said and the build goes on: its job then
    runs no more than Flink does.
    """
    job = body.get('job')
    if not isinstance(job, dict) or job.get('engine') != 'flink' or not job.get('rest') or not job.get('name'):
        return None
    rest, name, holder = str(job['rest']), str(job['name']), body.get('holder', 'an unknown holder')
    try:
        cancelled = flink_rest_api.cancel_jobs(rest, name)
    except (OSError, ValueError) as e:
        said = f'could not cancel Flink job {name} of the killed build {holder}: Flink did not answer at {rest} ({e})'
        LOG.warning('%s', said)
        return said
    if not cancelled:
        said = f'the killed build {holder} left no Flink job running ({name})'
        LOG.info('%s', said)
        return said
    started = clock()
    while running(rest, name) and clock() - started < wait:
        time.sleep(poll)
    ended = 'ended' if not running(rest, name) else f'not ended after {wait:.0f} s'
    said = (f'cancelled Flink job {", ".join(cancelled)} ({name}) of the killed build {holder} that held the '
            f'lease: {ended} in {clock() - started:.0f} s, before deleting what it left')
    LOG.warning('%s', said)
    return said


def running(rest: str, name: str) -> bool:
    """Whether a Flink job named `name` has not reached a terminal state (unknown when Flink does not answer:
    False, as nothing can be waited for)."""
    jobs = (flink_rest_api.read_json(f'{rest}/jobs/overview') or {}).get('jobs', [])
    return any(j.get('name') == name and j.get('state') not in flink_rest_api.TERMINAL for j in jobs)
