"""Converging cloud disks and shared NAS claims with the database: create (or adopt) the claim,
grow it, delete it. Claims are never owner-referenced; only these functions delete one, and
only for a row that asks for it."""

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction
from django.utils import timezone

from compute.models import Allocation
from fleet.models import DEFAULT_REGION
from fleet.selectors import region_scope
from starverse.core import kube
from starverse.core.kube import namespace_name
from storage import manifests
from storage.choices import DiskStatus
from storage.models import Disk, SharedStorage

logger = logging.getLogger(__name__)
D = DiskStatus
T = TypeVar("T")


class StillDeleting(Exception):
    """The claim is terminating (a pod still mounts it); check again shortly."""


def in_its_region(function: Callable[[str], T]) -> Callable[[str], T]:
    """Run a step for one disk (by id) against its region's cluster, where its claim is."""

    @functools.wraps(function)
    def wrapper(disk_id: str) -> T:
        region = Disk.objects.filter(pk=disk_id).values_list("region", flat=True).first()
        with region_scope(region):
            return function(disk_id)

    return wrapper


def claim_converge(manifest: dict[str, Any]) -> dict[str, Any]:
    """Create the claim, or bring the one there to the wanted labels and (larger) size. An
    instance's own disk kept as a cloud disk is adopted this way: same claim, new labels."""
    meta = manifest["metadata"]
    existing = kube.read("PersistentVolumeClaim", meta["namespace"], meta["name"])
    if existing is None:
        return kube.ensure(manifest)
    if (existing.get("metadata") or {}).get("deletionTimestamp"):
        raise kube.PermanentKubeError(f"claim {meta['name']} is being deleted")
    patch: dict[str, Any] = {}
    have_labels = existing["metadata"].get("labels") or {}
    wanted_labels = {k: v for k, v in meta["labels"].items() if have_labels.get(k) != v}
    if "starverse.io/instance" in have_labels and "starverse.io/instance" not in meta["labels"]:
        wanted_labels["starverse.io/instance"] = None  # adopted: no longer the instance's
    if wanted_labels:
        patch["metadata"] = {"labels": wanted_labels}
    want = manifest["spec"]["resources"]["requests"]["storage"]
    have = ((existing.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
    if have is None or kube.quantity_gib(want) > kube.quantity_gib(have):
        patch["spec"] = {"resources": {"requests": {"storage": want}}}
    if not patch:
        return existing
    return kube.claim_patch(meta["namespace"], meta["name"], patch)


@in_its_region
def disk_ensure(disk_id: str) -> str:
    """Make the disk's claim exist at its size; a new disk becomes available."""
    disk = Disk.objects.filter(pk=disk_id).first()
    if disk is None or disk.status not in (D.CREATING, D.AVAILABLE, D.ATTACHED):
        return disk.status if disk else "gone"
    kube.tenant_namespace_ensure(disk.tenant_id)
    claim_converge(manifests.cloud_disk_claim(disk))
    Disk.objects.filter(pk=disk.pk, status=D.CREATING).update(status=D.AVAILABLE)
    return Disk.objects.values_list("status", flat=True).get(pk=disk.pk)


@in_its_region
def disk_remove(disk_id: str) -> str:
    """Delete a deleting disk's claim and wait until it is gone."""
    disk = Disk.objects.filter(pk=disk_id).first()
    if disk is None or disk.status != D.DELETING:
        return disk.status if disk else "gone"
    if disk.k8s_name:
        kube.delete("PersistentVolumeClaim", disk.k8s_namespace, disk.k8s_name)
        if kube.read("PersistentVolumeClaim", disk.k8s_namespace, disk.k8s_name) is not None:
            raise StillDeleting(disk.k8s_name)
    with transaction.atomic():
        Disk.objects.filter(pk=disk.pk, status=D.DELETING).update(
            status=D.DELETED, deleted_at=timezone.now()
        )
    logger.info("disk.deleted disk=%s", disk.id)
    return D.DELETED


def nas_ensure(nas_id: str) -> str:
    nas = SharedStorage.objects.filter(pk=nas_id).first()
    if nas is None or nas.status not in SharedStorage.LIVE:
        return nas.status if nas else "gone"
    kube.tenant_namespace_ensure(nas.tenant_id)
    claim_converge(manifests.nas_claim(nas))
    SharedStorage.objects.filter(pk=nas.pk, status=SharedStorage.Status.CREATING).update(
        status=SharedStorage.Status.READY
    )
    return SharedStorage.objects.values_list("status", flat=True).get(pk=nas.pk)


def nas_remove(nas_id: str) -> str:
    nas = SharedStorage.objects.filter(pk=nas_id).first()
    if nas is None or nas.status != SharedStorage.Status.DELETING:
        return nas.status if nas else "gone"
    namespace = namespace_name(nas.tenant_id)
    kube.delete("PersistentVolumeClaim", namespace, nas.k8s_name)
    if kube.read("PersistentVolumeClaim", namespace, nas.k8s_name) is not None:
        raise StillDeleting(nas.k8s_name)
    SharedStorage.objects.filter(pk=nas.pk, status=SharedStorage.Status.DELETING).update(
        status=SharedStorage.Status.DELETED, deleted_at=timezone.now()
    )
    return SharedStorage.Status.DELETED


def nas_usage_refresh() -> int:
    """Read how full each shared NAS is from the kubelets' volume statistics of the nodes that
    run the tenants' instances (in the default region, the NAS's cluster). Returns how many
    NAS rows were updated."""
    ready = list(
        SharedStorage.objects.filter(status=SharedStorage.Status.READY).values_list(
            "pk", "tenant_id", "k8s_name"
        )
    )
    claims = {(namespace_name(t), name): pk for pk, t, name in ready}
    if not claims:
        return 0
    # The nodes where the tenants' pods run: those holding their GPUs.
    nodes = set(
        Allocation.objects.filter(
            holding__tenant_id__in={t for _pk, t, _name in ready},
            node__region_id=DEFAULT_REGION,
        )
        .values_list("node__name", flat=True)
        .distinct()
    )
    used: dict[str, int] = {}
    for node in sorted(nodes):
        try:
            volumes = kube.node_volume_stats(node)
        except kube.KubeError as error:
            logger.warning("nas.usage_unreadable node=%s error=%s", node, error)
            continue
        for volume in volumes:
            ref = volume["pvcRef"]
            pk = claims.get((ref.get("namespace"), ref.get("name")))
            if pk is not None and volume.get("usedBytes") is not None:
                used[pk] = max(used.get(pk, 0), int(volume["usedBytes"]))
    now = timezone.now()
    for pk, used_bytes in used.items():
        SharedStorage.objects.filter(pk=pk).update(used_bytes=used_bytes, used_at=now)
    return len(used)
