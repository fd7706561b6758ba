"""Image pre-pull: every catalogue image marked `prepull` is kept on every node of the
catalogue's GPU models by one DaemonSet (the usual pre-puller: an init container of the image
that only runs `true`, so the kubelet pulls it and keeps it, then a pause container that holds
the slot), in the PREPULL_NAMESPACE namespace the worker makes. Its pods ask for no GPU and for
a few millicores and MiB, which the kubelet's reservation covers, and may run at a low priority
(PREPULL_PRIORITY_CLASS) so that tenant pods always come first.

The database says which images are wanted; prepull_converge brings the cluster to it: one list
call, then a create for a new image, a replace where the rendered DaemonSet changed (another
image reference, other GPU models: its fingerprint annotation differs), a delete for an image no
longer marked. Nothing is written when nothing changed."""

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from compute.models import Image, Offering
from fleet.models import GpuModel
from starverse.core import kube

logger = logging.getLogger(__name__)
PREPULL_LABEL = "starverse.io/prepull"
FINGERPRINT = "starverse.io/spec-fingerprint"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# what the two containers ask for: the kubelet's own reservation covers it on a real node
SMALL = {"cpu": "10m", "memory": "16Mi"}
PAUSE_IMAGE_BYTES = 320_000  # registry.k8s.io/pause, compressed


@dataclass(frozen=True)
class Converged:
    created: list[str]
    replaced: list[str]
    deleted: list[str]


def daemonset_name(image: Image) -> str:
    """`prepull-<image id>` as a DNS label (ids are slugs: underscores become dashes)."""
    return ("prepull-" + re.sub(r"[^a-z0-9-]", "-", image.id.lower()))[:63].rstrip("-")


def gpu_product_labels() -> list[str]:
    """The GPU feature discovery labels (product with dashes) of the GPU models the catalogue
    offers: the nodes an instance can be placed on."""
    products = GpuModel.objects.filter(
        pk__in=Offering.objects.filter(active=True).values("gpu_model_id")
    ).values_list("product", flat=True)
    return sorted({product.replace(" ", "-") for product in products})


def _fingerprint(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _container(name: str, image: str, command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "resources": {"requests": dict(SMALL), "limits": dict(SMALL)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if command:
        container["command"] = command
    return container


def manifest(image: Image, products: list[str]) -> dict[str, Any]:
    """The pre-pull DaemonSet of one image on the nodes of `products` (GPU product labels)."""
    name = daemonset_name(image)
    labels = {**kube.MANAGED, PREPULL_LABEL: image.id[:63]}
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": products}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "initContainers": [_container("pull", image.container_image, ["true"])],
        "containers": [_container("pause", settings.PREPULL_PAUSE_IMAGE)],
    }
    if settings.PREPULL_PRIORITY_CLASS:
        pod_spec["priorityClassName"] = settings.PREPULL_PRIORITY_CLASS
    spec = {
        "selector": {"matchLabels": {PREPULL_LABEL: labels[PREPULL_LABEL]}},
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": settings.PREPULL_NAMESPACE,
            "labels": labels,
            "annotations": {FINGERPRINT: _fingerprint(spec)},
        },
        "spec": spec,
    }


def _namespace() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": settings.PREPULL_NAMESPACE, "labels": dict(kube.MANAGED)},
    }


def prepull_converge() -> Converged:
    """Bring the pre-pull DaemonSets of the current cluster (kube.cluster) to the catalogue's
    images marked `prepull` (active ones, on the catalogue's GPU models)."""
    products = gpu_product_labels()
    images = Image.objects.catalogue().filter(prepull=True).order_by("id") if products else []
    wanted = {daemonset_name(image): manifest(image, products) for image in images}
    namespace = settings.PREPULL_NAMESPACE
    have = kube.daemonsets_managed(namespace, PREPULL_LABEL)
    created: list[str] = []
    replaced: list[str] = []
    for name, body in wanted.items():
        existing = have.get(name)
        if existing is None:
            if not created:
                kube.ensure(_namespace())
            kube.ensure(body)
            created.append(name)
            continue
        annotations = existing["metadata"].get("annotations") or {}
        if annotations.get(FINGERPRINT) != body["metadata"]["annotations"][FINGERPRINT]:
            kube.daemonset_replace(body, existing)
            replaced.append(name)
    deleted = sorted(set(have) - set(wanted))
    for name in deleted:
        kube.delete("DaemonSet", namespace, name)
    if created or replaced or deleted:
        logger.info(
            "prepull.converged created=%s replaced=%s deleted=%s",
            ",".join(created),
            ",".join(replaced),
            ",".join(deleted),
        )
    return Converged(created, replaced, deleted)
