"""Thin Celery tasks for the fleet: they call a service and log what it did."""

import logging

from celery import shared_task

from fleet import selectors, services
from starverse.core import kube
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
    """Every region's cluster in turn: one that cannot be reached does not hold up the rest."""
    for region in selectors.regions_configured():
        try:
            with kube.cluster(selectors.region_target(region)):
                count = services.nodes_sync_from_cluster(region=region.name)
        except KubeError as error:
            logger.error("fleet.sync_failed region=%s error=%s", region.name, error)
            continue
        logger.info("fleet.synced region=%s nodes=%d", region.name, count)


@shared_task(acks_late=True, ignore_result=True, **TASK_RETRY)
def mirror_node_schedulable(node_id: str) -> None:
    """A node changed state: cordon or uncordon it on its region's cluster (fleet.services)."""
    if not selectors.regions_configured():
        return
    services.node_schedulable_mirror(node_id=node_id)
