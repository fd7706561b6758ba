"""Kubernetes objects for storage, as plain dicts: a cloud disk's claim, the tenant's NAS claim,
and the volumes and mounts an instance's pod gets for them."""

from typing import Any

from django.conf import settings

from starverse.core.kube import MANAGED, id_label, namespace_name, tenant_label
from storage.models import Disk, SharedStorage


def cloud_disk_name(disk_id: str) -> str:
    """A cloud disk's claim: `disk-dsk-…`, never equal to an instance disk's `disk-…`."""
    return f"disk-{disk_id.lower().replace('_', '-')}"


def nas_name(nas_id: str) -> str:
    return f"nas-{nas_id.lower().replace('_', '-')}"


def _storage_class(name: str | None) -> dict[str, str]:
    return {"storageClassName": name} if name else {}


def cloud_disk_claim(disk: Disk) -> dict[str, Any]:
    """A cloud disk's claim: labelled with its disk and never owner-referenced, so deleting an
    instance (or its namespace's other objects) never takes it along."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": disk.k8s_name,
            "namespace": disk.k8s_namespace,
            "labels": {
                **MANAGED,
                "starverse.io/tenant": tenant_label(disk.tenant_id),
                "starverse.io/disk": id_label(disk.id),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{disk.size_gb}Gi"}},
            **_storage_class(disk.storage_class),
        },
    }


def nas_claim(nas: SharedStorage) -> dict[str, Any]:
    """The tenant's shared NAS: one ReadWriteMany claim in its namespace, mounted by all of
    its instances; the claim's size is the quota."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": nas.k8s_name,
            "namespace": namespace_name(nas.tenant_id),
            "labels": {
                **MANAGED,
                "starverse.io/tenant": tenant_label(nas.tenant_id),
                "starverse.io/nas": id_label(nas.id),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": f"{nas.size_gb}Gi"}},
            **_storage_class(settings.NAS_STORAGE_CLASS),
        },
    }


def volumes_and_mounts(
    disks: list[Disk], nas: SharedStorage | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) for the attached cloud disks at /mnt/<name> and the NAS at /nas."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for disk in disks:
        volume = f"cd-{disk.id.split('_', 1)[1].lower()}"
        volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": disk.k8s_name}})
        mounts.append({"name": volume, "mountPath": disk.mount_path})
    if nas is not None:
        volumes.append({"name": "nas", "persistentVolumeClaim": {"claimName": nas.k8s_name}})
        mounts.append({"name": "nas", "mountPath": "/nas"})
    return volumes, mounts
