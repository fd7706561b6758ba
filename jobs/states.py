"""A job's moves: its row lock, its status changes and their timeline lines, and its end with
its ranks'. Shared by following the ranks (jobs.services.job_sync) and recovering them
(jobs.recovery), so a move reports the same events whichever path makes it."""

import logging
from datetime import timedelta
from typing import Any

from events.choices import EventType
from events.emit import emit_about
from instances.choices import InstanceStatus
from instances.lifecycle import instance_terminate
from instances.models import Instance
from jobs.choices import JobStatus
from jobs.models import Job, JobEvent
from starverse.core.text import Deferred

logger = logging.getLogger(__name__)
S = InstanceStatus
J = JobStatus

# What a job's move to each status reports (events.emit); the other moves report nothing.
JOB_EVENTS = {
    J.RUNNING: EventType.JOB_STARTED,
    J.RECOVERING: EventType.JOB_RECOVERING,
    J.SUCCEEDED: EventType.JOB_SUCCEEDED,
    J.FAILED: EventType.JOB_FAILED,
}


def job_locked(job_id: str) -> Job:
    return Job.objects.select_for_update().get(pk=job_id)


def rank_instances(job: Job) -> list[Instance]:
    """The job's ranks' instances, in rank order, with their nodes."""
    rows = job.ranks.select_related("instance__node").order_by("index")
    return [row.instance for row in rows]


def job_note(job: Job, status: str, message: Deferred | str) -> None:
    """A line on the job's timeline, its status unchanged."""
    JobEvent.objects.create(job=job, status=status, message=message)


def job_move(job: Job, status: str, message: Deferred) -> None:
    job.status = status
    job.save()
    job_note(job, status, message)
    if kind := JOB_EVENTS.get(JobStatus(status)):
        emit_about(job, kind, restarts=job.restarts, exit_code=job.exit_code)


def job_end(job: Job, status: str, message: Deferred, *, now: Any) -> None:
    job.finished_at = now
    job_move(job, status, message)
    logger.info("job.ended job=%s status=%s exit_code=%s", job.id, status, job.exit_code)


def job_end_with_ranks(
    job: Job, instances: list[Instance], status: str, message: Deferred, *, now: Any
) -> None:
    """End the job and give its ranks' GPUs back (terminated: their own disks go, their cloud
    disks and the NAS keep their data)."""
    for instance in instances:
        if instance.status not in (S.TERMINATING, S.TERMINATED):
            instance_terminate(instance_id=instance.pk, by_owner=True)
    job_end(job, status, message, now=now)


def past_time_limit(job: Job, now: Any) -> bool:
    limit = job.time_limit_minutes
    return bool(limit and job.started_at and now - job.started_at >= timedelta(minutes=limit))
