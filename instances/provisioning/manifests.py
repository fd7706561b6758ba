"""Kubernetes objects for an instance, as plain dicts: deterministic names from platform ids,
the managed-by label and the starverse.io labels on everything."""

from typing import Any

from django.conf import settings

MANAGED = {"app.kubernetes.io/managed-by": "starverse"}
SSH_PORT = 22
JUPYTER_PORT = 8888


def namespace_name(tenant_id: str) -> str:
    return f"sv-{tenant_id.lower().replace('_', '-')}"


def instance_name(instance_id: str) -> str:
    return f"inst-{instance_id.split('_', 1)[1].lower()}"


def disk_name(instance_id: str) -> str:
    return f"disk-{instance_id.split('_', 1)[1].lower()}"


def cloud_disk_name(disk_id: str) -> str:
    """A cloud disk's claim: `disk-dsk-…`, never equal to an instance disk's `disk-…`."""
    return f"disk-{disk_id.lower().replace('_', '-')}"


def nas_name(nas_id: str) -> str:
    return f"nas-{nas_id.lower().replace('_', '-')}"


def _tenant_label(tenant_id: str) -> str:
    return tenant_id.lower().replace("_", "-")


def labels(instance: Any) -> dict[str, str]:
    return {
        **MANAGED,
        "starverse.io/tenant": _tenant_label(instance.tenant_id),
        "starverse.io/instance": instance.id.lower().replace("_", "-"),
    }


def namespace(tenant_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace_name(tenant_id),
            "labels": {**MANAGED, "starverse.io/tenant": _tenant_label(tenant_id)},
        },
    }


def network_policy(tenant_id: str) -> dict[str, Any]:
    """Pods of a tenant talk to each other and the internet, never to other tenants."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "tenant-isolation",
            "namespace": namespace_name(tenant_id),
            "labels": dict(MANAGED),
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {}}]},
                {
                    "ports": [
                        {"port": SSH_PORT, "protocol": "TCP"},
                        {"port": JUPYTER_PORT, "protocol": "TCP"},
                    ]
                },
            ],
        },
    }


def ssh_secret(instance: Any, authorized_keys: str, jupyter_token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": f"{instance_name(instance.id)}-access",
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "stringData": {"authorized_keys": authorized_keys, "jupyter_token": jupyter_token},
    }


def disk_claim(instance: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": disk_name(instance.id),
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{instance.offering.local_disk_gb}Gi"}},
            **(
                {"storageClassName": settings.INSTANCE_STORAGE_CLASS}
                if settings.INSTANCE_STORAGE_CLASS
                else {}
            ),
        },
    }


def _storage_class(name: str | None) -> dict[str, str]:
    return {"storageClassName": name} if name else {}


def cloud_disk_claim(disk: Any) -> dict[str, Any]:
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
                "starverse.io/tenant": _tenant_label(disk.tenant_id),
                "starverse.io/disk": disk.id.lower().replace("_", "-"),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{disk.size_gb}Gi"}},
            **_storage_class(disk.storage_class),
        },
    }


def nas_claim(nas: Any) -> dict[str, Any]:
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
                "starverse.io/tenant": _tenant_label(nas.tenant_id),
                "starverse.io/nas": nas.id.lower().replace("_", "-"),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": f"{nas.size_gb}Gi"}},
            **_storage_class(settings.NAS_STORAGE_CLASS),
        },
    }


def _storage_volumes(disks: list[Any], nas: Any) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) for the attached cloud disks at /mnt/<name> and the NAS at /nas."""
    volumes, mounts = [], []
    for disk in disks:
        volume = f"cd-{disk.id.split('_', 1)[1].lower()}"
        volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": disk.k8s_name}})
        mounts.append({"name": volume, "mountPath": disk.mount_path})
    if nas is not None:
        volumes.append({"name": "nas", "persistentVolumeClaim": {"claimName": nas.k8s_name}})
        mounts.append({"name": "nas", "mountPath": "/nas"})
    return volumes, mounts


def pod(
    instance: Any, node_name: str, disks: list[Any] | tuple = (), nas: Any = None
) -> dict[str, Any]:
    offering, name = instance.offering, instance_name(instance.id)
    gpus = str(offering.gpu_count)
    storage_volumes, storage_mounts = _storage_volumes(list(disks), nas)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "spec": {
            "nodeName": node_name,
            "automountServiceAccountToken": False,
            "restartPolicy": "Always",
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "main",
                    "image": instance.image.container_image,
                    "ports": [
                        {"name": "ssh", "containerPort": SSH_PORT},
                        {"name": "jupyter", "containerPort": JUPYTER_PORT},
                    ],
                    "env": [
                        {"name": "STARVERSE_INSTANCE", "value": instance.id},
                        {
                            "name": "JUPYTER_TOKEN",
                            "valueFrom": {
                                "secretKeyRef": {"name": f"{name}-access", "key": "jupyter_token"}
                            },
                        },
                    ],
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": gpus,
                            "cpu": str(offering.cpu_cores),
                            "memory": f"{offering.memory_gb}Gi",
                        },
                        "requests": {
                            "nvidia.com/gpu": gpus,
                            "cpu": str(offering.cpu_cores),
                            "memory": f"{offering.memory_gb}Gi",
                        },
                    },
                    "volumeMounts": [
                        {"name": "shm", "mountPath": "/dev/shm"},  # noqa: S108 - in the pod
                        {"name": "disk", "mountPath": "/root/data"},
                        {"name": "access", "mountPath": "/etc/starverse/access", "readOnly": True},
                        {
                            "name": "public",
                            "mountPath": "/public/data",
                            "subPath": "data",
                            "readOnly": True,
                        },
                        {
                            "name": "public",
                            "mountPath": "/public/models",
                            "subPath": "models",
                            "readOnly": True,
                        },
                        *storage_mounts,
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "shm",
                    "emptyDir": {
                        "medium": "Memory",
                        "sizeLimit": f"{max(1, offering.memory_gb // 2)}Gi",
                    },
                },
                {"name": "disk", "persistentVolumeClaim": {"claimName": disk_name(instance.id)}},
                {
                    "name": "access",
                    "secret": {"secretName": f"{name}-access", "defaultMode": 0o400},
                },
                {"name": "public", **public_pool_volume()},
                *storage_volumes,
            ],
        },
    }


def public_pool_volume() -> dict[str, Any]:
    """The public datasets and models pool, read-only, from the operator-configured source."""
    source = settings.PUBLIC_POOL_SOURCE
    if source.startswith("nfs://"):
        server, _slash, path = source[len("nfs://") :].partition("/")
        return {"nfs": {"server": server, "path": "/" + path, "readOnly": True}}
    if source.startswith("pvc://"):
        return {"persistentVolumeClaim": {"claimName": source[len("pvc://") :], "readOnly": True}}
    return {"hostPath": {"path": source.removeprefix("hostpath://"), "type": "Directory"}}


def service(instance: Any) -> dict[str, Any]:
    name = instance_name(instance.id)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace_name(instance.tenant_id),
            "labels": labels(instance),
        },
        "spec": {
            "type": "NodePort",
            "selector": {"starverse.io/instance": labels(instance)["starverse.io/instance"]},
            "ports": [
                {"name": "ssh", "port": SSH_PORT, "targetPort": SSH_PORT},
                {"name": "jupyter", "port": JUPYTER_PORT, "targetPort": JUPYTER_PORT},
            ],
        },
    }
