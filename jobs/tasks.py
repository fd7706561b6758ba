"""Thin Celery tasks for jobs: take ids, re-read rows, call a service."""

import logging

from celery import Task, shared_task

from jobs import recovery, services
from jobs.choices import ENDED
from jobs.models import Job, JobRank

logger = logging.getLogger(__name__)
RESTART_POLL_S = 2


@shared_task(acks_late=True, ignore_result=True)
def sync_job(job_id: str) -> None:
    services.job_sync(job_id)


@shared_task(acks_late=True, ignore_result=True)
def sync_job_of_instance(instance_id: str) -> None:
    """A rank's program ended (instances.signals.workload_ended): its job follows."""
    rank = JobRank.objects.filter(pk=instance_id).values_list("job_id", flat=True).first()
    if rank is not None:
        services.job_sync(rank)


@shared_task(acks_late=True, ignore_result=True)
def sync_jobs() -> None:
    """Every few seconds: each job that has not ended follows its ranks (placed, running, lost
    and placed again), whatever task may have been lost on the way."""
    for job_id in Job.objects.exclude(status__in=ENDED).values_list("id", flat=True):
        try:
            services.job_sync(job_id)
        except Exception:  # one job's trouble does not hold up the rest
            logger.exception("jobs.sync_failed job=%s", job_id)


@shared_task(bind=True, acks_late=True, ignore_result=True, max_retries=300)
def restart_rank(self: Task[[str], None], instance_id: str) -> None:
    """A rank whose program failed starts again once its instance has stopped."""
    try:
        recovery.rank_restart(instance_id)
    except recovery.StillStopping:
        raise self.retry(countdown=RESTART_POLL_S) from None
