"""Thin Celery tasks for endpoints: take ids, re-read rows, call a service."""

import logging

from celery import Task, shared_task
from django.conf import settings

from billing.notices import runway_notices_check
from endpoints.metrics import samples_collect
from endpoints.provisioning import endpoint_converge, endpoints_lost_work_hand_out
from endpoints.scheduler import endpoints_sync
from endpoints.selectors import endpoint_spend_per_hour_fen
from instances.selectors import spend_per_hour_fen
from starverse.core.kube import KUBE_TASK_UNTIL_DONE, KubeError

logger = logging.getLogger(__name__)


@shared_task(**KUBE_TASK_UNTIL_DONE)
def converge_endpoint(self: Task[[str], None], endpoint_id: str) -> None:
    """Bring the endpoint's objects on the cluster in line with its row (create, scale,
    update, delete); comes back while its snapshot is being taken."""
    if endpoint_converge(endpoint_id).wait:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S)


@shared_task(acks_late=True, ignore_result=True)
def reconcile_endpoints() -> None:
    """Every RECONCILE_INTERVAL_S: converge tasks lost with a worker or the broker sent again."""
    endpoints_lost_work_hand_out()


@shared_task(acks_late=True, ignore_result=True, expires=5)
def sync_endpoints() -> None:
    """Every second: bind new replicas' pods, follow readiness, bill ready minutes."""
    try:
        endpoints_sync()
    except KubeError as error:
        logger.warning("endpoints.sync_failed error=%s", error)
    if settings.ENDPOINT_STATS_URL:
        samples_collect(settings.ENDPOINT_STATS_URL)


@shared_task(acks_late=True, ignore_result=True)
def check_runways() -> None:
    """The runway notices, with what the tenants' instances and endpoints burn together (one
    task, so the two never tell a wallet different levels)."""
    burn = spend_per_hour_fen()
    for tenant_id, fen in endpoint_spend_per_hour_fen().items():
        burn[tenant_id] = burn.get(tenant_id, 0) + fen
    runway_notices_check(burn)
