"""Converging an instance's objects on the cluster with what the database wants. Every step
is an "ensure" (safe to run twice, after a crash, or concurrently with the reconcile loop);
retryable cluster errors propagate to the task, which retries with backoff; permanent ones
fail the instance with a message the user can act on. Failed provisioning is never billed.
This module only talks to the cluster: what it saw is reported to the state machine
(instances.states), which changes the instance's status."""

import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from fleet.choices import NodeState
from fleet.models import Node
from instances.choices import InstanceStatus
from instances.models import Instance, InstanceEvent
from instances.provisioning import manifests
from instances.states import (
    instance_fail,
    instance_mark_running,
    instance_mark_stopped,
    instance_mark_terminated,
)
from starverse.accounts.models import SshKey
from starverse.core import kube
from starverse.core.text import later
from storage import manifests as storage_manifests
from storage import provisioning as storage
from storage.models import Disk, SharedStorage

logger = logging.getLogger(__name__)
S = InstanceStatus
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


class StillPending(Exception):
    """The pod is not ready yet; check again shortly."""


def _authorized_keys(instance: Instance) -> str:
    keys = SshKey.objects.filter(user__tenant_id=instance.tenant_id)
    if instance.ssh_key_ids:
        keys = keys.filter(pk__in=instance.ssh_key_ids)
    keys = keys.values_list("public_key", flat=True)
    return "\n".join(keys) + "\n"


def provision(instance_id: str) -> str:
    """Create (or find) every object of a provisioning instance, then mark it running once its
    pod is ready. Returns the instance's status; raises StillPending while the pod starts."""
    instance = (
        Instance.objects.select_related("offering", "image", "node").filter(pk=instance_id).first()
    )
    if instance is None or instance.status != S.PROVISIONING or instance.node is None:
        return instance.status if instance else "gone"
    namespace, name = (
        manifests.namespace_name(instance.tenant_id),
        manifests.instance_name(instance.id),
    )
    if not instance.k8s_name:
        Instance.objects.filter(pk=instance.pk).update(
            k8s_namespace=namespace,
            k8s_name=name,
            provisioning_since=timezone.now(),
            jupyter_token=instance.jupyter_token or secrets.token_urlsafe(24),
        )
        instance.refresh_from_db()
    try:
        kube.ensure(kube.namespace(instance.tenant_id))
        kube.ensure(manifests.network_policy(instance.tenant_id))
        kube.ensure(
            manifests.ssh_secret(instance, _authorized_keys(instance), instance.jupyter_token)
        )
        kube.ensure(manifests.disk_claim(instance))
        disks, nas = _storage(instance)
        pod = kube.ensure(manifests.pod(instance, instance.node.name, disks, nas))
        service = kube.ensure(manifests.service(instance))
    except kube.PermanentKubeError as error:
        instance_fail(
            instance.id,
            later(
                "The cluster refused the instance: %(error)s. It was not billed; "
                "try again or contact support."
            )
            % {"error": error},
        )
        return S.FAILED
    if (pod.get("spec") or {}).get("nodeName") != instance.node.name:
        # A pod left on another node (one that was lost): free its GPUs and volumes at once.
        kube.delete("Pod", namespace, name, force=True)
        raise StillPending("old pod on another node deleted")
    ports = {p["name"]: p.get("nodePort") for p in service.get("spec", {}).get("ports", [])}
    Instance.objects.filter(pk=instance.pk).update(
        ssh_port=ports.get("ssh"), jupyter_port=ports.get("jupyter")
    )
    return check_pod(instance.id)


def _storage(instance: Instance) -> tuple[list[Disk], object | None]:
    """The instance's attached cloud disks and its tenant's shared NAS, their claims made sure
    of (a disk's creation task may not have run yet)."""
    disks = list(Disk.objects.filter(instance_id=instance.id).order_by("name"))
    for disk in disks:
        storage.claim_converge(storage_manifests.cloud_disk_claim(disk))
    nas = SharedStorage.objects.filter(
        tenant_id=instance.tenant_id, status__in=SharedStorage.LIVE
    ).first()
    if nas is not None:
        storage.claim_converge(storage_manifests.nas_claim(nas))
    return disks, nas


def events_mirror(instance: Instance) -> None:
    """Kubernetes events of the instance's pod become its progress events, once each."""
    try:
        events = kube.events_for(instance.k8s_namespace, instance.k8s_name)
    except kube.KubeError:
        return
    events_record(instance, events)


def events_record(instance: Instance, events: list[dict]) -> int:
    """Record the events not seen before on the instance's timeline, in the cluster's words
    (Kubernetes speaks English); returns how many were new."""
    seen = set(instance.seen_event_uids)
    new = [
        e
        for e in sorted(events, key=lambda e: e.get("lastTimestamp") or "")
        if e["metadata"]["uid"] not in seen
    ]
    InstanceEvent.objects.bulk_create(
        InstanceEvent(
            instance=instance,
            status=instance.status,
            # one parameter, so no part of the cluster's text is mistaken for one of ours
            message=later("Kubernetes: %(event)s")
            % {"event": f"{event.get('reason') or ''}: {event.get('message') or ''}"},
        )
        for event in new
    )
    if new:
        Instance.objects.filter(pk=instance.pk).update(
            seen_event_uids=[*instance.seen_event_uids, *(e["metadata"]["uid"] for e in new)][-200:]
        )
    return len(new)


def check_pod(instance_id: str) -> str:
    instance = Instance.objects.filter(pk=instance_id).first()
    if instance is None or instance.status != S.PROVISIONING:
        return instance.status if instance else "gone"
    events_mirror(instance)
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    if pod is None:
        raise StillPending("pod not created yet")
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILURES:
            instance_fail(
                instance.id,
                later(
                    "The image %(image)s could not be pulled (%(reason)s). It was not "
                    "billed; choose another image or try again later."
                )
                % {"image": container.get("image"), "reason": waiting["reason"]},
            )
            return S.FAILED
    if status.get("phase") == "Failed":
        instance_fail(
            instance.id,
            later("The instance's container failed to start: %(reason)s.")
            % {"reason": status.get("reason") or status.get("message") or "unknown"},
        )
        return S.FAILED
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if status.get("phase") == "Running" and ready:
        return instance_mark_running(instance.id)
    since = instance.provisioning_since or instance.created_at
    if timezone.now() - since > timedelta(seconds=settings.PROVISIONING_TIMEOUT_S):
        instance_fail(
            instance.id,
            later("The instance did not start within %(m)d minutes. It was not billed.")
            % {"m": settings.PROVISIONING_TIMEOUT_S // 60},
        )
        return S.FAILED
    raise StillPending(status.get("phase") or "Pending")


def _delete_pod_and_wait(instance: Instance) -> None:
    """Delete the pod; its GPUs are free only once it is gone, so wait for that."""
    if not instance.k8s_name:
        return
    kube.delete("Pod", instance.k8s_namespace, instance.k8s_name)
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    if pod is None:
        return
    node = (pod.get("spec") or {}).get("nodeName")
    if node and Node.objects.filter(name=node, state=NodeState.DOWN).exists():
        # An unreachable kubelet never confirms the deletion: skip the grace period.
        kube.delete("Pod", instance.k8s_namespace, instance.k8s_name, force=True)
        return
    raise StillPending("pod terminating")


def stop(instance_id: str) -> str:
    """Delete the pod, keep the disk, secret and service; once it is gone the state machine
    gives the GPUs back."""
    instance = Instance.objects.filter(pk=instance_id).first()
    if instance is None or instance.status != S.STOPPING:
        return instance.status if instance else "gone"
    _delete_pod_and_wait(instance)
    return instance_mark_stopped(instance.id)


def terminate(instance_id: str) -> str:
    """Delete everything the instance had on the cluster, then its GPUs; 404s count as done."""
    instance = Instance.objects.filter(pk=instance_id).first()
    if instance is None or instance.status != S.TERMINATING:
        return instance.status if instance else "gone"
    _delete_pod_and_wait(instance)
    claim = manifests.disk_name(instance.id)
    if instance.k8s_name:
        objects = [("Service", instance.k8s_name), ("Secret", f"{instance.k8s_name}-access")]
        if not instance.keep_disk:
            objects.append(("PersistentVolumeClaim", claim))
        for kind, name in objects:
            kube.delete(kind, instance.k8s_namespace, name)
    return instance_mark_terminated(instance.id, disk_claim=claim)
