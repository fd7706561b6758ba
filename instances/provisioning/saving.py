"""Saving an instance as an image on the cluster, never on the web tier: one build pod in the
tenant namespace (docs/operator-guide.md, "Saved images").

* Its first init container copies the platform's toolset (INIT_IMAGE), as an instance pod's
  does, so that any image, brought ones too, can be saved.
* Its second, of the instance's own image (its python3), runs the toolset's
  `starverse-save-layer` with the instance's system disk mounted read-only: what differs from
  the image's own SYSTEM_DIRS becomes one gzip'd layer in an emptyDir, with whiteouts for what
  the tenant deleted; its termination message counts the layer's bytes.
* Its container, the operator's pinned IMAGE_PUSHER_IMAGE, runs `crane append`: the base's
  layers plus the new one, pushed to IMAGE_REGISTRY/t-<tenant>/<name>:<tag>. Only it mounts the
  push credential (a Secret the tenant never sees: tenants have no access to Secrets, and the
  tenant's own image, which runs the layer step, never mounts it).

No container is privileged or adds a capability beyond Pod Security "baseline": the layer step
only reads files (DAC_OVERRIDE for files of any owner), the push is plain network I/O. A running
instance's claim is ReadWriteOnce, so its build pod runs on the instance's node.

The worker follows the pod like a holding (instances.tasks.save_image, again every minute for
every image still saving): Succeeded → the image is ready with its size (the base's plus the
layer's); Failed → failed with the step's message; then the pod is deleted."""

import json
import logging
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils.translation import gettext as _

from compute.choices import ImageStatus
from compute.images import image_transition
from compute.models import Image
from instances.choices import InstanceStatus
from instances.images import registry_secret, saving_note
from instances.models import Instance
from instances.provisioning.manifests import (
    SYSTEM_DIRS,
    TOOLS_STAGE,
    _security_context,
    system_disk_name,
    tools_container,
    tools_mount,
    tools_volume,
)
from starverse.core import kube
from starverse.core.text import later

logger = logging.getLogger(__name__)
PUSH_SECRET = "image-push"  # noqa: S105 - the Secret's name
PUSH_CONFIG_DIR = "/etc/starverse/push"
SOURCE_MOUNT = "/starverse-system"
WORK_MOUNT = "/work"
LAYER = f"{WORK_MOUNT}/layer.tar.gz"
# from the platform's toolset (its init container copies it, as an instance's pod does), so an
# image brought without the platform's init is saved too
LAYER_COMMAND = [f"{TOOLS_STAGE}/bin/starverse-save-layer", SOURCE_MOUNT, LAYER, *SYSTEM_DIRS]


class StillSaving(Exception):
    """The build pod has not ended yet; look again shortly."""


def build_pod_name(image_id: str) -> str:
    return f"save-{image_id.split('_', 1)[1].lower()}"


def _resources(cpu: str, memory: str) -> dict[str, Any]:
    amounts = {"cpu": cpu, "memory": memory}
    return {"limits": amounts, "requests": dict(amounts)}


def _push_container(image: Image) -> dict[str, Any]:
    flags = ["--insecure"] if settings.IMAGE_REGISTRY_INSECURE else []
    mounts = [{"name": "work", "mountPath": WORK_MOUNT, "readOnly": True}]
    env = []
    if settings.IMAGE_REGISTRY_USERNAME:
        mounts.append({"name": "push", "mountPath": PUSH_CONFIG_DIR, "readOnly": True})
        env.append({"name": "DOCKER_CONFIG", "value": PUSH_CONFIG_DIR})
    return {
        "name": "push",
        "image": settings.IMAGE_PUSHER_IMAGE,
        "command": ["crane", "append", *flags, "--base", image.base, "--new_layer", LAYER],
        "args": ["--new_tag", image.container_image],
        "env": env,
        "resources": _resources("1", "1Gi"),
        "securityContext": _security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }


def _volumes(instance: Instance) -> list[dict[str, Any]]:
    """The system disk read-only, the layer's scratch space and, if any, the push credential."""
    volumes: list[dict[str, Any]] = [
        {
            "name": "system",
            "persistentVolumeClaim": {
                "claimName": system_disk_name(instance.id),
                "readOnly": True,
            },
        },
        {"name": "work", "emptyDir": {}},
        tools_volume(),
    ]
    if settings.IMAGE_REGISTRY_USERNAME:
        volumes.append(
            {
                "name": "push",
                "secret": {
                    "secretName": PUSH_SECRET,
                    "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
                },
            }
        )
    return volumes


def _layer_container(image: Image) -> dict[str, Any]:
    return {
        "name": "layer",
        "image": image.base,
        "command": list(LAYER_COMMAND),
        "resources": _resources("2", "2Gi"),
        "securityContext": _security_context(),
        # the counts are its termination message; a failure with none says why in its log
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "system", "mountPath": SOURCE_MOUNT, "readOnly": True},
            {"name": "work", "mountPath": WORK_MOUNT},
            tools_mount(TOOLS_STAGE),
        ],
    }


def build_pod(image: Image, instance: Instance) -> dict[str, Any]:
    """The build pod of a saved image (see the module's docstring)."""
    node = instance.node if instance.status == InstanceStatus.RUNNING else None
    tenant = str(image.tenant_id)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": build_pod_name(image.id),
            "namespace": kube.namespace_name(tenant),
            "labels": {
                **kube.MANAGED,
                "starverse.io/tenant": kube.tenant_label(tenant),
                kube.IMAGE_LABEL: kube.id_label(image.id),
            },
        },
        "spec": {
            # a running instance's claim is ReadWriteOnce: on its node
            **({"nodeName": node.name} if node is not None else {}),
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            **(
                {"imagePullSecrets": [{"name": instance.image.pull_secret}]}
                if instance.image.pull_secret
                else {}
            ),
            "initContainers": [tools_container(), _layer_container(image)],
            "containers": [_push_container(image)],
            "volumes": _volumes(instance),
        },
    }


def _layer_bytes(pod: dict[str, Any]) -> int:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        message = ((status.get("state") or {}).get("terminated") or {}).get("message") or ""
        try:
            return int(json.loads(message)["layer_bytes"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def _failure(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for item in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        terminated = (item.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            return f"{item.get('name')}: {(terminated.get('message') or '').strip()[-500:]}"
    return status.get("message") or status.get("reason") or "the build pod failed"


def images_saving() -> list[str]:
    return list(Image.objects.filter(status=ImageStatus.SAVING).values_list("id", flat=True))


def image_save_converge(image_id: str) -> None:
    """One pass over a saving image: make its build pod once, then read it until it ends,
    record the end and delete the pod. Raises StillSaving while it runs."""
    image = Image.objects.filter(pk=image_id, status=ImageStatus.SAVING).first()
    if image is None:
        return
    namespace = kube.namespace_name(str(image.tenant_id))
    name = build_pod_name(image.id)
    pod = kube.read("Pod", namespace, name)
    if pod is None:
        instance = Instance.objects.select_related("image", "node").get(pk=image.saved_from)
        if instance.status in (InstanceStatus.TERMINATING, InstanceStatus.TERMINATED):
            why = _("The instance was terminated before its image was saved: nothing was saved.")
            _ended(image, ImageStatus.FAILED, error=why)
            return
        kube.tenant_namespace_ensure(str(image.tenant_id))
        if settings.IMAGE_REGISTRY_USERNAME:
            secret = registry_secret(
                PUSH_SECRET,
                str(image.tenant_id),
                settings.IMAGE_REGISTRY,
                settings.IMAGE_REGISTRY_USERNAME,
                settings.IMAGE_REGISTRY_PASSWORD,
            )
            kube.ensure(secret, update=True)
        pod = kube.ensure(build_pod(image, instance))
        logger.info("image.build_pod image=%s pod=%s/%s", image.id, namespace, name)
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        bases = Image.objects.filter(
            Q(tenant__isnull=True) | Q(tenant_id=image.tenant_id), container_image=image.base
        )
        size = (bases.values_list("size_bytes", flat=True).first() or 0) + _layer_bytes(pod)
        _ended(image, ImageStatus.READY, size_bytes=size)
    elif phase == "Failed":
        _ended(image, ImageStatus.FAILED, error=_failure(pod))
    else:
        raise StillSaving(image.id)
    kube.delete("Pod", namespace, name)


def _ended(image: Image, to: str, *, size_bytes: int = 0, error: str = "") -> None:
    """The image is ready or failed, and its instance's timeline says so (once: a second run
    of the step finds it past saving and writes nothing)."""
    if not image_transition(image.id, to, size_bytes=size_bytes, error=error):
        return
    if to == ImageStatus.READY:
        message = later("The image %(name)s is saved (%(gb)s GB) and can be ordered.") % {
            "name": image.name,
            "gb": f"{size_bytes / 10**9:.1f}",
        }
    else:
        message = later("Saving as the image %(name)s failed: %(error)s") % {
            "name": image.name,
            "error": error,
        }
    saving_note(image=image, message=message)
