"""Thin Celery tasks for the fleet: they call a service and log what it did."""

import logging

from celery import shared_task
from django.conf import settings

from fleet import services
from starverse.core.kube import TASK_RETRY, KubeError

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def check_heartbeats() -> None:
    downed = services.heartbeats_check()
    if downed:
        logger.warning("fleet.heartbeat_lost nodes=%s", ",".join(downed))


@shared_task(acks_late=True, ignore_result=True)
def rollup_telemetry() -> None:
    services.telemetry_rollup()


@shared_task(acks_late=True, ignore_result=True)
def prune_telemetry() -> None:
    raw, rolled = services.telemetry_prune()
    logger.info("fleet.pruned raw=%d rollups=%d", raw, rolled)


@shared_task(acks_late=True, ignore_result=True)
def sync_nodes_from_cluster() -> None:
    if not settings.KUBECONFIG:
        return
    try:
        count = services.nodes_sync_from_cluster()
    except KubeError as error:
        logger.error("fleet.sync_failed error=%s", error)
        return
    logger.info("fleet.synced nodes=%d", count)


@shared_task(acks_late=True, ignore_result=True, **TASK_RETRY)
def mirror_node_schedulable(node_id: str) -> None:
    """A node changed state: cordon or uncordon it on the cluster (fleet.services)."""
    if not settings.KUBECONFIG:
        return
    services.node_schedulable_mirror(node_id=node_id)
