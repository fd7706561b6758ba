"""Converging the cluster to an endpoint's row, the way a controller does: each object is
created once (ensure), read afterwards, and replaced only when what we render differs. Disk and
NAS sources are served from a VolumeSnapshot restored into a new read-only claim; the
Deployment waits for that claim. Deleting removes every object of the endpoint (its pods go
with the Deployment; the scheduler gives their GPUs back when they are gone). An endpoint runs
in its source disk's region: every call for it goes to that region's cluster."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Value
from django.db.models.functions import Greatest
from django.utils import timezone
from django.utils.translation import gettext as _

from endpoints import manifests
from endpoints.choices import EndpointStatus, SourceKind
from endpoints.models import Endpoint
from endpoints.selectors import endpoint_region
from endpoints.services import endpoint_fail
from fleet.selectors import region_scope
from instances.provisioning.namespaces import tenant_policy_converge
from starverse.core import kube
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.kube import namespace_name

logger = logging.getLogger(__name__)
S = EndpointStatus
DELETED_KINDS = ("HTTPRoute", "HTTPScaledObject", "Service", "Deployment")


@dataclass(frozen=True)
class Outcome:
    """What one converge pass did: `wait` says to come back (a snapshot is not ready yet)."""

    state: str
    wait: bool = False


def endpoint_converge(endpoint_id: str) -> Outcome:
    endpoint = (
        Endpoint.objects.select_related("offering", "source_disk").filter(pk=endpoint_id).first()
    )
    if endpoint is None or endpoint.status == S.DELETED:
        return Outcome("gone")
    # every call for it goes to its region's cluster
    with region_scope(endpoint_region(endpoint) or None):
        return _converge(endpoint)


# The statuses in which an endpoint waits on its converge task (made, changed, deleted).
CONVERGING = (S.PROVISIONING, S.UPDATING, S.DELETING)


def endpoints_lost_work_hand_out(*, now: datetime | None = None) -> list[str]:
    """Hand the converge task out again to every endpoint still provisioning, updating or
    deleting RECONCILE_STUCK_AFTER_S after it was made: the task may have been lost with a
    killed worker or a flushed broker, and nothing else would ever send it again (the
    instances' reconcile loop does the same for theirs). Converging ensures each object, so
    a repeat for an endpoint whose task is alive costs a few reads."""
    made_before = (now or timezone.now()) - timedelta(seconds=settings.RECONCILE_STUCK_AFTER_S)
    waiting = list(
        Endpoint.objects.filter(status__in=CONVERGING, created_at__lt=made_before)
        .order_by("created_at")
        .values_list("pk", flat=True)
    )
    for endpoint_id in waiting:
        enqueue_on_commit("endpoints.tasks.converge_endpoint", endpoint_id)
    if waiting:
        logger.info("endpoints.converge_handed_out count=%d", len(waiting))
    return waiting


def _converge(endpoint: Endpoint) -> Outcome:
    if endpoint.status == S.DELETING:
        return _delete(endpoint)
    if endpoint.status == S.FAILED:
        return Outcome("failed")
    namespace = namespace_name(endpoint.tenant_id)
    if not endpoint.k8s_name:
        tenant_policy_converge(endpoint.tenant_id)
        Endpoint.objects.filter(pk=endpoint.pk).update(
            k8s_namespace=namespace, k8s_name=manifests.object_name(endpoint.id)
        )
        endpoint.k8s_namespace = namespace
    if endpoint.source_kind != SourceKind.DATASET:
        snapshot = kube.ensure(manifests.volume_snapshot(endpoint))
        status = snapshot.get("status") or {}
        error = (status.get("error") or {}).get("message")
        if error:
            endpoint_fail(
                endpoint_id=endpoint.id,
                message=_("The snapshot of the source failed: %(error)s") % {"error": error},
            )
            return Outcome("failed")
        if not status.get("readyToUse"):
            # read again on the next pass; the snapshot is never created twice
            snapshot = kube.read("VolumeSnapshot", namespace, snapshot["metadata"]["name"]) or {}
            if not (snapshot.get("status") or {}).get("readyToUse"):
                return Outcome("snapshotting", wait=True)
            status = snapshot["status"]
        kube.ensure(manifests.model_claim(endpoint, str(status.get("restoreSize") or "1Gi")))
    name = manifests.object_name(endpoint.id)
    existing = kube.read("Deployment", namespace, name)
    low, high = manifests.replica_bounds(endpoint)
    current = ((existing or {}).get("spec") or {}).get("replicas")
    # The autoscaler owns the replica count between the bounds; a change of bounds is immediate.
    replicas = low if current is None else min(max(int(current), low), high)
    kube.ensure(manifests.deployment(endpoint, replicas), update=True)
    if existing is not None and current != replicas:
        kube.deployment_scale(namespace, name, replicas)
    kube.ensure(manifests.service(endpoint))
    kube.ensure(manifests.scaled_object(endpoint), update=True)
    kube.ensure(manifests.http_route(endpoint))
    # every object of this generation is there: the scheduler may call it running once a
    # replica is Ready (a worker killed before this line leaves it provisioning, and the
    # lost-work handout sends this task again)
    Endpoint.objects.filter(pk=endpoint.pk).update(
        replicas_desired=replicas,
        converged_generation=Greatest("converged_generation", Value(endpoint.generation)),
    )
    _old_generations_delete(endpoint)
    logger.info("endpoint.converged endpoint=%s replicas=%d", endpoint.id, replicas)
    return Outcome("converged")


def _old_generations_delete(endpoint: Endpoint) -> None:
    """Snapshots and claims of earlier generations, once no pod of theirs is left."""
    if endpoint.generation <= 1 or endpoint.source_kind == SourceKind.DATASET:
        return
    pods = kube.pods_labelled([endpoint.k8s_namespace], manifests.selector(endpoint))
    in_use = {(pod["metadata"].get("labels") or {}).get(manifests.GENERATION_LABEL) for pod in pods}
    for generation in range(1, endpoint.generation):
        if str(generation) in in_use:
            continue
        name = manifests.snapshot_name(endpoint.id, generation)
        kube.delete("PersistentVolumeClaim", endpoint.k8s_namespace, name)
        kube.delete("VolumeSnapshot", endpoint.k8s_namespace, name)


def _delete(endpoint: Endpoint) -> Outcome:
    namespace = endpoint.k8s_namespace
    if namespace:
        name = manifests.object_name(endpoint.id)
        for kind in DELETED_KINDS:
            kube.delete(kind, namespace, name)
        for generation in range(1, endpoint.generation + 1):
            snapshot = manifests.snapshot_name(endpoint.id, generation)
            kube.delete("PersistentVolumeClaim", namespace, snapshot)
            kube.delete("VolumeSnapshot", namespace, snapshot)
    Endpoint.objects.filter(pk=endpoint.pk).exclude(status=S.DELETED).update(
        status=S.DELETED, replicas_desired=0, deleted_at=timezone.now()
    )
    logger.info("endpoint.deleted endpoint=%s", endpoint.id)
    return Outcome("deleted")
