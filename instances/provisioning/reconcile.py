"""The reconcile loop: the database says what should exist, the cluster is converged to it.
Run by beat; every action is one the tasks would take anyway, so running it at any moment,
twice, or alongside the tasks is safe."""

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.utils import timezone

from instances.choices import InstanceStatus
from instances.models import Instance
from instances.provisioning import manifests
from instances.provisioning.converge import events_record
from instances.states import instance_recreate
from starverse.core import kube
from starverse.core.dispatch import enqueue_on_commit
from storage.choices import DiskStatus
from storage.models import Disk, SharedStorage

logger = logging.getLogger(__name__)
S = InstanceStatus
STUCK_AFTER = timedelta(seconds=60)
# The task that carries out each state that waits on the cluster.
TASK_FOR = {
    S.PROVISIONING: "instances.tasks.provision_instance",
    S.STOPPING: "instances.tasks.stop_instance",
    S.TERMINATING: "instances.tasks.terminate_instance",
}


@dataclass
class Report:
    recreated: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    events: int = 0


def _pod_ok(pod: dict | None) -> bool:
    return pod is not None and (pod.get("status") or {}).get("phase") not in ("Failed", "Succeeded")


def reconcile(*, now=None) -> Report:  # type: ignore[no-untyped-def]
    now = now or timezone.now()
    report = Report()
    # A running instance whose pod vanished (deleted by hand, evicted, node rebooted) goes back
    # to provisioning on its node: billing pauses until the pod is ready again.
    for instance in Instance.objects.filter(status=S.RUNNING).exclude(k8s_name=""):
        if _pod_ok(kube.read("Pod", instance.k8s_namespace, instance.k8s_name)):
            continue
        if instance_recreate(instance.id, now=now):
            report.recreated.append(instance.id)
    # Work whose task was lost (worker crash, broker restart) is handed out again.
    for instance in Instance.objects.filter(status__in=list(TASK_FOR)):
        last = instance.events.order_by("-at").values_list("at", flat=True).first()
        if last and now - last > STUCK_AFTER and instance.id not in report.recreated:
            enqueue_on_commit(TASK_FOR[instance.status], instance.id)
            report.requeued.append(instance.id)
    # Objects on the cluster that no live instance wants are removed.
    wanted_pods = set(
        Instance.objects.filter(status__in=(S.PROVISIONING, S.RUNNING, S.STOPPING)).values_list(
            "k8s_namespace", "k8s_name"
        )
    )
    keeps_objects = set(
        Instance.objects.exclude(status=S.TERMINATED)
        .exclude(k8s_name="")
        .values_list("k8s_namespace", "k8s_name")
    )
    for namespace, name in kube.managed("Pod"):
        if (namespace, name) not in wanted_pods:
            kube.delete("Pod", namespace, name)
            report.orphans.append(f"pod/{namespace}/{name}")
    for kind in ("Service", "Secret"):
        for namespace, name in kube.managed(kind):
            if (namespace, name.removesuffix("-access")) not in keeps_objects:
                kube.delete(kind, namespace, name)
                report.orphans.append(f"{kind.lower()}/{namespace}/{name}")
    # A claim holds somebody's data: it goes only when no row wants it at all (an instance that
    # is not terminated, a cloud disk or a NAS that is not deleted).
    wanted_claims = _wanted_claims()
    for namespace, name in kube.managed("PersistentVolumeClaim"):
        if (namespace, name) not in wanted_claims:
            kube.delete("PersistentVolumeClaim", namespace, name)
            report.orphans.append(f"persistentvolumeclaim/{namespace}/{name}")
    report.events = _mirror_warnings()
    if report.recreated or report.requeued or report.orphans:
        logger.warning(
            "reconcile recreated=%s requeued=%s orphans=%s",
            report.recreated,
            report.requeued,
            report.orphans,
        )
    return report


def _wanted_claims() -> set[tuple[str, str]]:
    wanted = {
        (namespace, manifests.disk_name(instance_id))
        for namespace, instance_id in Instance.objects.exclude(status=S.TERMINATED)
        .exclude(k8s_name="")
        .values_list("k8s_namespace", "id")
    }
    wanted |= set(
        Disk.objects.exclude(status=DiskStatus.DELETED)
        .exclude(k8s_name="")
        .values_list("k8s_namespace", "k8s_name")
    )
    for tenant_id, name in SharedStorage.objects.exclude(
        status=SharedStorage.Status.DELETED
    ).values_list("tenant_id", "k8s_name"):
        wanted.add((manifests.namespace_name(tenant_id), name))
    return wanted


def _mirror_warnings() -> int:
    """Warnings about running pods (OOMKilled, BackOff, FailedMount …) join the instance's
    timeline once each, whatever the phase: one list call for the whole cluster."""
    by_pod: dict[tuple[str, str], list[dict]] = {}
    for event in kube.warning_events():
        involved = event.get("involvedObject") or {}
        key = (involved.get("namespace") or "", involved.get("name") or "")
        by_pod.setdefault(key, []).append(event)
    if not by_pod:
        return 0
    mirrored = 0
    live = Instance.objects.filter(status__in=(S.RUNNING, S.PROVISIONING)).exclude(k8s_name="")
    for instance in live.only("id", "status", "k8s_namespace", "k8s_name", "seen_event_uids"):
        events = by_pod.get((instance.k8s_namespace, instance.k8s_name))
        if events:
            mirrored += events_record(instance, events)
    return mirrored
