"""Thin Celery tasks for clusters: take ids, re-read rows, call a service."""

from typing import Any

from celery import shared_task

from clusters import preflight
from starverse.core.kube import TASK_RETRY

KUBE_TASK = {"bind": True, "acks_late": True, "ignore_result": True, **TASK_RETRY}


@shared_task(**KUBE_TASK)
def preflight_cluster(self: Any, cluster_id: str) -> None:
    """Sent by every rank that comes up (instances.states.instance_mark_running): the round
    runs when the last one is up."""
    preflight.preflight_run(cluster_id)
