"""Thin Celery tasks for the fleet: they call a service and log what it did."""

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from instances import fleet
from instances.provisioning.kube import KubeError, RetryableKubeError

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def check_heartbeats() -> None:
    downed = fleet.heartbeats_check()
    if downed:
        logger.warning("fleet.heartbeat_lost nodes=%s", ",".join(downed))


@shared_task(acks_late=True, ignore_result=True)
def rollup_telemetry() -> None:
    fleet.telemetry_rollup()


@shared_task(acks_late=True, ignore_result=True)
def prune_telemetry() -> None:
    raw, rolled = fleet.telemetry_prune()
    logger.info("fleet.pruned raw=%d rollups=%d", raw, rolled)


@shared_task(acks_late=True, ignore_result=True)
def sync_nodes_from_cluster() -> None:
    if not settings.KUBECONFIG:
        return
    try:
        count = fleet.nodes_sync_from_cluster()
    except KubeError as error:
        logger.error("fleet.sync_failed error=%s", error)
        return
    logger.info("fleet.synced nodes=%d", count)


RETRY = {
    "autoretry_for": (RetryableKubeError,),
    "retry_backoff": 2,
    "retry_backoff_max": 120,
    "retry_jitter": True,
    "max_retries": 12,
}


@shared_task(
    bind=True,
    acks_late=True,
    ignore_result=True,
    max_retries=None,
    **{k: v for k, v in RETRY.items() if k != "max_retries"},
)
def provision_instance(self: Any, instance_id: str) -> None:
    from instances.provisioning.converge import StillPending, provision

    try:
        provision(instance_id)
    except StillPending:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S) from None


@shared_task(bind=True, acks_late=True, ignore_result=True, **RETRY)
def stop_instance(self: Any, instance_id: str) -> None:
    from instances.provisioning.converge import StillPending, stop

    try:
        stop(instance_id)
    except StillPending:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S) from None


@shared_task(bind=True, acks_late=True, ignore_result=True, **RETRY)
def terminate_instance(self: Any, instance_id: str) -> None:
    from instances.provisioning.converge import StillPending, terminate

    try:
        terminate(instance_id)
    except StillPending:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S) from None


@shared_task(acks_late=True, ignore_result=True)
def drain_queue(product: str) -> None:
    from instances.lifecycle import queue_drain

    placed = queue_drain(product=product)
    if placed:
        logger.info("queue.placed product=%s instances=%s", product, ",".join(placed))


@shared_task(acks_late=True, ignore_result=True)
def meter_usage() -> None:
    from instances.metering import metering_tick

    metering_tick()


@shared_task(acks_late=True, ignore_result=True)
def reconcile_cluster() -> None:
    if not settings.KUBECONFIG:
        return
    from instances.provisioning.reconcile import reconcile

    try:
        reconcile()
    except KubeError as error:
        logger.error("reconcile.failed error=%s", error)


@shared_task(acks_late=True, ignore_result=True)
def renew_monthly() -> None:
    from instances.monthly import renewals_run

    renewals_run()


@shared_task(bind=True, acks_late=True, ignore_result=True, **RETRY)
def ensure_disk(self: Any, disk_id: str) -> None:
    from instances.provisioning.storage import disk_ensure

    try:
        disk_ensure(disk_id)
    except KubeError as error:
        if isinstance(error, RetryableKubeError):
            raise
        logger.error("disk.ensure_failed disk=%s error=%s", disk_id, error)


@shared_task(bind=True, acks_late=True, ignore_result=True, **RETRY)
def delete_disk(self: Any, disk_id: str) -> None:
    from instances.provisioning.storage import StillDeleting, disk_remove

    try:
        disk_remove(disk_id)
    except StillDeleting:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S * 5) from None


@shared_task(bind=True, acks_late=True, ignore_result=True, **RETRY)
def ensure_nas(self: Any, nas_id: str) -> None:
    from instances.provisioning.storage import nas_ensure

    try:
        nas_ensure(nas_id)
    except KubeError as error:
        if isinstance(error, RetryableKubeError):
            raise
        logger.error("nas.ensure_failed nas=%s error=%s", nas_id, error)


@shared_task(bind=True, acks_late=True, ignore_result=True, **RETRY)
def delete_nas(self: Any, nas_id: str) -> None:
    from instances.provisioning.storage import StillDeleting, nas_remove

    try:
        nas_remove(nas_id)
    except StillDeleting:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S * 5) from None


@shared_task(acks_late=True, ignore_result=True)
def bill_storage(tenant_ids: list[str] | None = None) -> None:
    from instances.storage import storage_bill

    storage_bill(tenant_ids=tenant_ids)


@shared_task(acks_late=True, ignore_result=True)
def refresh_nas_usage() -> None:
    if not settings.KUBECONFIG:
        return
    from instances.provisioning.storage import nas_usage_refresh

    nas_usage_refresh()
