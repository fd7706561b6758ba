from typing import Any

from django.apps import AppConfig

from instances.signals import workload_ended, workload_lost
from starverse.core.dispatch import enqueue_on_commit


def sync_on_workload_ended(sender: Any, instance_id: str, exit_code: int, **kwargs: Any) -> None:
    """Receiver of instances' `workload_ended`: a rank's program ended, so its job is looked at
    once the move commits (succeeded, failed, or run again by its restart policy)."""
    enqueue_on_commit("jobs.tasks.sync_job_of_instance", instance_id)


def sync_on_workload_lost(sender: Any, instance_id: str, **kwargs: Any) -> None:
    """Receiver of instances' `workload_lost`: a rank lost its node or pod and is placed again,
    so its job is recovering from the moment the move commits (its timeline says why)."""
    enqueue_on_commit("jobs.tasks.sync_job_of_instance", instance_id)


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self) -> None:
        from instances.gangs import workload_owner_register
        from jobs.links import rank_link
        from jobs.recovery import job_rank_lost

        workload_ended.connect(sync_on_workload_ended, dispatch_uid="jobs-workload-ended")
        workload_lost.connect(sync_on_workload_lost, dispatch_uid="jobs-workload-lost")
        workload_owner_register("job_", rank_link, job_rank_lost)
