"""Spark's own view of a build's job: the REST API of its driver's web UI (`/api/v1`), as pure readings.

A SparkRunner build's driver is the Beam job server the launcher starts, on
this machine; the build gives its web UI a port of its own
(`runners.with_spark_ui_port`) and reads the jobs of the one application
there. Before the workers' first count reaches the launcher this is what the
stall bound judges by (`engine_job.wait`): a task running is work, and a job
that waits for executors (its only worker lost) shows none and stands still.
"""

from __future__ import annotations

from typing import Optional

from pipelines.build_index.flink_rest_api import EngineLook, read_json

# What moves in a Spark job while it works: its tasks' counts (a task that ends, fails or starts).
JOB_FIELDS = ('status', 'numCompletedTasks', 'numFailedTasks', 'numActiveTasks', 'numSkippedTasks')
# What moves in a stage while its tasks run: their records, sent by each executor's heartbeat.
STAGE_FIELDS = ('numCompleteTasks', 'inputRecords', 'outputRecords', 'shuffleReadRecords', 'shuffleWriteRecords')


def application(ui: str) -> Optional[str]:
    """The id of the application the driver at `ui` runs (a job server's driver runs one per job); None when
    the UI does not answer or shows none."""
    apps = read_json(f'{ui}/api/v1/applications', kind=list) or []
    ids = [a['id'] for a in apps if isinstance(a, dict) and a.get('id')]
    return ids[-1] if ids else None


def jobs_look(jobs: list, stages: list) -> EngineLook:
    """What an application's jobs (`/applications/ID/jobs`) and active stages (`.../stages?status=active`) say
    of its progress: running while a task of a running job runs."""
    jobs = [j for j in jobs if isinstance(j, dict)]
    running = any(j.get('status') == 'RUNNING' and (j.get('numActiveTasks') or 0) > 0 for j in jobs)
    moved = tuple(sorted((j.get('jobId', -1), *(j.get(k) for k in JOB_FIELDS)) for j in jobs))
    staged = tuple(sorted((s.get('stageId', -1), s.get('attemptId', 0), *(s.get(k) for k in STAGE_FIELDS))
                          for s in stages if isinstance(s, dict)))
    return EngineLook(running, (moved, staged))


def look(ui: str) -> Optional[EngineLook]:
    """Spark's view of the job the driver at `ui` runs; None when it does not answer or runs no job yet."""
    app = application(ui)
    jobs = read_json(f'{ui}/api/v1/applications/{app}/jobs', kind=list) if app else None
    if not jobs:
        return None
    return jobs_look(jobs, read_json(f'{ui}/api/v1/applications/{app}/stages?status=active', kind=list) or [])
