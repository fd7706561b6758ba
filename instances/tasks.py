"""Thin Celery tasks for instances: take ids, re-read rows, call a service."""

import logging

from celery import Task, shared_task
from django.conf import settings
from django.db.models import Q

from billing.notices import runway_notices_check
from fleet.selectors import region_target, regions_configured
from instances import autostop, images, lifecycle, metering, monthly
from instances.choices import STARTING_OR_RUNNING
from instances.models import Instance
from instances.provisioning import converge, logs, namespaces, prepull, reconcile, saving
from instances.registry import RegistryError
from instances.selectors import spend_per_hour_fen
from starverse.core import kube
from starverse.core.dispatch import send
from starverse.core.kube import KUBE_TASK, KUBE_TASK_UNTIL_DONE, KubeError

logger = logging.getLogger(__name__)


@shared_task(**KUBE_TASK_UNTIL_DONE)
def provision_instance(self: Task[[str], None], instance_id: str) -> None:
    try:
        converge.provision(instance_id)
    except converge.StillPending:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S) from None


@shared_task(**KUBE_TASK_UNTIL_DONE)
def save_image(self: Task[[str], None], image_id: str) -> None:
    """A saved image's build pod: made once, followed until it ends (instances.images)."""
    try:
        saving.image_save_converge(image_id)
    except saving.StillSaving:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S) from None


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=(RegistryError,),
    retry_backoff=5,
    retry_backoff_max=600,
    retry_jitter=True,
    max_retries=12,
)
def delete_image_manifest(image_id: str) -> None:
    """A deleted saved image's manifest out of the operator's registry (instances.images):
    retried with backoff while the registry cannot be reached."""
    images.image_manifest_delete(image_id)


@shared_task(acks_late=True, ignore_result=True)
def follow_saving_images() -> None:
    """Every minute: each image still saving is looked at again (a lost task loses no save)."""
    if not settings.KUBECONFIG:
        return
    for image_id in saving.images_saving():
        send("instances.tasks.save_image", image_id)


@shared_task(**KUBE_TASK)
def stop_instance(self: Task[[str], None], instance_id: str) -> None:
    try:
        converge.stop(instance_id)
    except converge.StillPending:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S) from None


@shared_task(**KUBE_TASK)
def terminate_instance(self: Task[[str], None], instance_id: str) -> None:
    try:
        converge.terminate(instance_id)
    except converge.StillPending:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S) from None


@shared_task(**KUBE_TASK_UNTIL_DONE)
def converge_ports(self: Task[[str], None], instance_id: str) -> None:
    """An instance's declared ports changed (instances.gateway): its gateway routes follow."""
    try:
        converge.ports_converge(instance_id)
    except converge.StillPending:
        raise self.retry(countdown=settings.PROVISIONING_POLL_S) from None


@shared_task(acks_late=True, ignore_result=True)
def restart_instance(instance_id: str) -> None:
    """An instance stopped to change its disks starts again (instances.states)."""
    lifecycle.instance_restart(instance_id=instance_id)


@shared_task(acks_late=True, ignore_result=True)
def drain_queue(product: str) -> None:
    placed = lifecycle.queue_drain(product=product)
    if placed:
        logger.info("queue.placed product=%s instances=%s", product, ",".join(placed))


@shared_task(acks_late=True, ignore_result=True)
def review_queue(tenant_id: str | None = None) -> None:
    """Every minute, and for one tenant after it was credited: orders passed over for want of
    money wait again or fail after their grace, and the queues are served."""
    placed = lifecycle.queue_review(tenant_id=tenant_id)
    if placed:
        logger.info("queue.placed tenant=%s instances=%s", tenant_id, ",".join(placed))


@shared_task(acks_late=True, ignore_result=True)
def node_changed(node_id: str, state: str, reason: str) -> None:
    """A node left service (fleet.services.node_transition): tell its instances."""
    affected = lifecycle.instances_on_node_changed(node_id=node_id, state=state, reason=reason)
    if affected:
        logger.info("node.instances node=%s state=%s instances=%s", node_id, state, affected)


@shared_task(acks_late=True, ignore_result=True)
def meter_usage() -> None:
    metering.metering_tick()


@shared_task(acks_late=True, ignore_result=True)
def reconcile_cluster() -> None:
    """One pass per region's cluster: one that cannot be reached does not hold up the rest."""
    for region in regions_configured():
        try:
            with kube.cluster(region_target(region)):
                reconcile.reconcile(region=region.name)
        except KubeError as error:
            logger.error("reconcile.failed region=%s error=%s", region.name, error)


@shared_task(acks_late=True, ignore_result=True)
def check_workloads() -> None:
    """Every few seconds: programs run to their end (a job's) that ended stop their instance,
    so their GPUs go back within seconds, and what they printed is shipped to the database
    (the web tier reads logs there); nothing is listed while none runs."""
    for region in regions_configured():
        try:
            with kube.cluster(region_target(region)):
                reconcile.workloads_check(region=region.name)
                logs.logs_ship(region=region.name)
        except KubeError as error:
            logger.error("workloads_check.failed region=%s error=%s", region.name, error)


@shared_task(acks_late=True, ignore_result=True)
def converge_prepull() -> None:
    """The catalogue's pre-pulled images (periodically, and when an image changes in the
    admin) onto every region's cluster: one that cannot be reached does not hold up the rest."""
    for region in regions_configured():
        try:
            with kube.cluster(region_target(region)):
                prepull.prepull_converge()
        except KubeError as error:
            logger.error("prepull.failed region=%s error=%s", region.name, error)


@shared_task(acks_late=True, ignore_result=True)
def converge_tenant_namespaces() -> None:
    """Bring every tenant namespace's labels, RoleBinding and NetworkPolicy up to the
    platform's policy (a release, or the operator's CIDR settings, changed it), in every
    region's cluster."""
    for region in regions_configured():
        try:
            with kube.cluster(region_target(region)):
                namespaces.tenant_namespaces_sweep()
        except KubeError as error:
            logger.error("tenant_namespaces.sweep_failed region=%s error=%s", region.name, error)


@shared_task(acks_late=True, ignore_result=True)
def renew_monthly() -> None:
    monthly.renewals_run()


@shared_task(acks_late=True, ignore_result=True)
def send_rental_not_renewed(event_id: int) -> None:
    monthly.rental_not_renewed_notice_send(event_id=event_id)


@shared_task(acks_late=True, ignore_result=True)
def check_runways() -> None:
    """Runway warnings at what the running instances burn now (instances.selectors)."""
    runway_notices_check(spend_per_hour_fen())


@shared_task(**KUBE_TASK)
def refresh_access(self: Task[[str], None], tenant_id: str) -> None:
    """A person's SSH keys changed (`tenant_id`: their own account): every instance with a pod
    that they ordered, for themselves or for a team, gets its access Secret rendered again."""
    for instance_id in Instance.objects.filter(
        Q(tenant_id=tenant_id) | Q(created_by__tenant_id=tenant_id),
        status__in=STARTING_OR_RUNNING,
    ).values_list("id", flat=True):
        converge.access_refresh(instance_id)


@shared_task(acks_late=True, ignore_result=True)
def auto_stop() -> None:
    """Every minute: scheduled stops that are due, then the idle auto-stop's warnings and stops."""
    scheduled = autostop.schedules_run()
    idle = autostop.idle_run()
    if scheduled or idle.stopped or idle.warned:
        logger.info(
            "autostop.run scheduled=%s idle_stopped=%s warned=%s",
            ",".join(scheduled),
            ",".join(idle.stopped),
            ",".join(idle.warned),
        )
