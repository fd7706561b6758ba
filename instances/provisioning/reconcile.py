"""The reconcile loop: the database says what should exist, the cluster is converged to it.
Run by beat; every action is one the tasks would take anyway, so running it at any moment,
twice, or alongside the tasks is safe.

The worker may list only inside tenant namespaces (its RoleBinding there; docs/operator-guide.md
"Cluster credentials"), so a pass lists the platform's namespaces once and then each kind of object
in each namespace where the database has something live, or had until lately."""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db.models import Max, Q
from django.utils import timezone

from compute.choices import ImageStatus
from compute.models import Image
from instances.choices import InstanceStatus
from instances.gangs import POD_LOST, gang_hooks, workload_owner_lost
from instances.gateway import served_ports
from instances.models import Instance, Workload
from instances.provisioning import manifests
from instances.provisioning.converge import events_record
from instances.provisioning.saving import build_pod_name
from instances.signals import gang_checking
from instances.states import instance_recreate, instance_workload_ended
from starverse.core import kube
from starverse.core.dispatch import enqueue_on_commit
from storage.choices import DiskStatus
from storage.models import Disk, SharedStorage

logger = logging.getLogger(__name__)
S = InstanceStatus
# How long a tenant namespace is still swept after its last instance, disk or NAS ended: a task
# cut short, or a provisioning pass racing a terminate, leaves its leftovers just then.
SWEPT_AFTER_END = timedelta(hours=1)
# The task that carries out each state that waits on the cluster. A cluster's checking ranks
# wait for its pre-flight check, which the clusters app runs when it hears gang_checking (by
# the cluster's id; at most one round runs at a time, so a repeat is harmless).
TASK_FOR = {
    S.PROVISIONING: "instances.tasks.provision_instance",
    S.STOPPING: "instances.tasks.stop_instance",
    S.TERMINATING: "instances.tasks.terminate_instance",
}
WAITING = (*TASK_FOR, S.CHECKING)


@dataclass
class Report:
    recreated: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    events: int = 0


def reconcile(*, now: datetime | None = None, region: str | None = None) -> Report:
    """One pass of the loop, from one list of each kind of object: the pods of running
    instances that vanished are recreated, work whose task was lost is handed out again, what
    no row wants is removed, and warnings about pods join their instances' timelines. With
    `region`, the pass is that region's cluster's (run inside its kube.cluster context): only
    its running instances are looked for among the pods listed."""
    now = now or timezone.now()
    report = Report()
    in_region = Q(region_id=region) if region else Q()
    # Read before the pods are listed: a pod made after the list is not yet a running one's.
    running = list(
        Instance.objects.filter(in_region, status__in=(S.RUNNING, S.CHECKING))
        .exclude(k8s_name="")
        .values_list("id", "k8s_namespace", "k8s_name")
    )
    namespaces = _swept_namespaces(now=now)
    listed = kube.pods_managed(namespaces, label_selector=kube.INSTANCE_SELECTOR)
    pods = {(pod.namespace, pod.name): pod for pod in listed if not pod.build}
    report.recreated = _vanished_recreate(running, pods, now=now)
    report.requeued = _lost_work_hand_out(now=now, skip=report.recreated)
    report.queues = _queues_serve()
    report.orphans = _orphans_remove(pods, namespaces, [pod for pod in listed if pod.build])
    report.events = _mirror_warnings()
    if report.recreated or report.requeued or report.orphans:
        logger.warning(
            "reconcile recreated=%s requeued=%s orphans=%s",
            report.recreated,
            report.requeued,
            report.orphans,
        )
    return report


def _swept_namespaces(*, now: datetime) -> list[str]:
    """The tenant namespaces this pass compares with the database: those on the cluster whose
    tenant has an instance, a cloud disk or a NAS that is live or ended within
    SWEPT_AFTER_END. Elsewhere nothing of ours should exist."""
    since = now - SWEPT_AFTER_END
    tenants = set(
        Instance.objects.filter(Q(terminated_at__isnull=True) | Q(terminated_at__gte=since))
        .exclude(k8s_name="")
        .values_list("tenant_id", flat=True)
    )
    for model in (Disk, SharedStorage):
        tenants |= set(
            model.objects.filter(Q(deleted_at__isnull=True) | Q(deleted_at__gte=since))
            .values_list("tenant_id", flat=True)
            .distinct()
        )
    wanted = {kube.namespace_name(tenant_id) for tenant_id in tenants}
    return sorted(
        item["metadata"]["name"]
        for item in kube.tenant_namespaces()
        if item["metadata"]["name"] in wanted
    )


def _vanished_recreate(
    running: list[tuple[str, str, str]],
    pods: dict[tuple[str, str], kube.ClusterPod],
    *,
    now: datetime,
) -> list[str]:
    """A running (or checking) instance whose pod vanished (deleted by hand, evicted, node
    rebooted) goes back to provisioning on its node: billing pauses until the pod is ready
    again (a cluster's: until its pre-flight check passes again). One whose pod ran a program
    to its end (its Workload) and ended stops instead, billed to the program's end; a pod the
    kubelet failed itself (Evicted, NodeShutdown: a `reason` of the pod's) did not end its
    program, which runs again in a new pod as any vanished pod's instance does; its owner (a
    job) places it again as it places a rank whose node was lost (_owner_recovers)."""
    recreated = []
    programs = set(
        Workload.objects.filter(instance_id__in=[row[0] for row in running]).values_list(
            "instance_id", flat=True
        )
    )
    for instance_id, namespace, name in running:
        pod = pods.get((namespace, name))
        if pod is not None and pod.phase not in ("Failed", "Succeeded"):
            continue
        if instance_id in programs and pod is not None and _program_ended(pod):
            workload_end(instance_id, pod.ended)
            continue
        moved = _owner_recovers(instance_id, pod) if instance_id in programs else None
        if moved is None:
            moved = instance_recreate(instance_id, now=now)
        if moved:
            recreated.append(instance_id)
    return recreated


def _owner_recovers(instance_id: str, pod: kube.ClusterPod | None) -> bool | None:
    """A program's instance whose pod vanished is its owner's to place again (a job's rank:
    billing paused for the whole job, placed again with its disks): whether it moved, or None
    when no owner takes it (it is recreated on its node)."""
    instance = Instance.objects.select_related("node").filter(pk=instance_id).first()
    if instance is None or instance.node is None:
        return None
    if pod is None:
        reason = "its pod vanished"
    elif pod.reason:
        reason = f"its kubelet failed its pod: {pod.reason}"
    else:
        reason = "its pod was deleted"
    return workload_owner_lost(instance, cause=POD_LOST, node=instance.node, reason=reason)


# The label every pod that runs a program to its end carries (instances.provisioning.manifests).
WORKLOAD_SELECTOR = f"{kube.INSTANCE_SELECTOR},starverse.io/workload"


def workloads_check(*, region: str | None = None) -> list[str]:
    """The programs of running instances that have ended, found within seconds rather than
    at the reconcile loop's next pass: one list of the labelled pods per namespace that has
    such an instance running (none listed when none runs). Returns the instances stopped."""
    in_region = Q(region_id=region) if region else Q()
    running = {
        (namespace, name): instance_id
        for instance_id, namespace, name in Instance.objects.filter(
            in_region, status__in=(S.RUNNING, S.CHECKING), workload__isnull=False
        )
        .exclude(k8s_name="")
        .values_list("id", "k8s_namespace", "k8s_name")
    }
    namespaces = sorted({namespace for namespace, _name in running})
    ended = []
    for pod in kube.pods_managed(namespaces, label_selector=WORKLOAD_SELECTOR):
        instance_id = running.get((pod.namespace, pod.name))
        if instance_id and _program_ended(pod) and workload_end(instance_id, pod.ended):
            ended.append(instance_id)
    return ended


def _program_ended(pod: kube.ClusterPod) -> bool:
    """Whether the pod's program ended of itself: its container ended, and neither the kubelet
    failed the pod (evicted, the node shut down) nor was it being deleted (its program was
    stopped: a vanished pod, run again)."""
    return pod.ended is not None and not pod.reason and not pod.deleting


def workload_end(instance_id: str, ended: kube.ContainerEnd | None) -> bool:
    """A program the instance runs to its end has ended (its pod Succeeded or Failed, as the
    reconcile loop or a watch of the pod found it)."""
    if ended is None:
        return False
    return instance_workload_ended(
        instance_id,
        exit_code=ended.exit_code,
        finished_at=ended.finished_at,
        message=ended.message,
    )


def _lost_work_hand_out(*, now: datetime, skip: list[str]) -> list[str]:
    """Work whose task was lost (worker crash, broker restart) is handed out again: an
    instance waiting on the cluster with no sign of life for a while, neither on its timeline
    nor from a task watching its pod (which reads its events every few seconds)."""
    requeued = []
    waiting = Instance.objects.filter(status__in=WAITING).annotate(last_event=Max("events__at"))
    checks: set[str] = set()
    stuck_after = timedelta(seconds=settings.RECONCILE_STUCK_AFTER_S)
    for instance_id, status, last_event, watched, gang in waiting.values_list(
        "id", "status", "last_event", "pod_watch__events_read_at", "holding__gang"
    ):
        alive = max(last_event, watched or last_event) if last_event else None
        if alive and now - alive > stuck_after and instance_id not in skip:
            if status != S.CHECKING:
                enqueue_on_commit(TASK_FOR[S(status)], instance_id)
            elif gang not in checks:
                checks.add(gang)
                gang_checking.send(sender=Instance, gang=gang)
            else:
                continue
            requeued.append(instance_id)
    return requeued


def _queues_serve() -> list[str]:
    """Serve every GPU product that has orders waiting: a message that would have drained its
    queue may have been lost (a broker down when the order committed); serving a queue that
    cannot place anything is one query."""
    products = sorted(
        set(
            Instance.objects.filter(status=S.QUEUED).values_list(
                "offering__gpu_model__product", flat=True
            )
        )
    )
    for product in products:
        enqueue_on_commit("instances.tasks.drain_queue", product)
    return products


def _orphans_remove(
    pods: dict[tuple[str, str], kube.ClusterPod],
    namespaces: list[str],
    builds: list[kube.ClusterPod],
) -> list[str]:
    """Objects on the cluster that no live instance wants are removed (a gateway route and its
    Service go with their port). A claim holds somebody's data: it goes only when no row wants
    it at all (an instance that is not terminated, a cloud disk or a NAS that is not
    deleted)."""
    # Read after the pods were listed: an instance placed since then has no pod in the list.
    wanted_pods = set(
        Instance.objects.filter(
            status__in=(S.PROVISIONING, S.CHECKING, S.RUNNING, S.STOPPING)
        ).values_list("k8s_namespace", "k8s_name")
    )
    orphans = []
    for namespace, name in pods:
        if (namespace, name) not in wanted_pods:
            kube.delete("Pod", namespace, name)
            orphans.append(f"pod/{namespace}/{name}")
    # an image's build pod is its saving's while the image saves (saving.image_save_converge
    # removes it at the end); one left by an image no longer saving goes here
    saving_pods = {
        (kube.namespace_name(str(tenant)), build_pod_name(image_id))
        for image_id, tenant in Image.objects.filter(status=ImageStatus.SAVING).values_list(
            "id", "tenant_id"
        )
    }
    for pod in builds:
        if (pod.namespace, pod.name) not in saving_pods:
            kube.delete("Pod", pod.namespace, pod.name)
            orphans.append(f"pod/{pod.namespace}/{pod.name}")
    # an inference endpoint's objects are its own controller's (endpoints.provisioning)
    listed = {
        kind: kube.managed(kind, namespaces, label_selector=kube.INSTANCE_SELECTOR)
        for kind in ("Service", "Secret", "HTTPRoute")
    }
    # Read after the lists: a port added since has no objects in them.
    served = {
        (namespace, name): set(served_ports(SimpleNamespace(ports=ports)))
        for namespace, name, ports in Instance.objects.exclude(status=S.TERMINATED)
        .exclude(k8s_name="")
        .values_list("k8s_namespace", "k8s_name", "ports")
    }
    shared = _gang_objects_wanted()
    for kind, objects in listed.items():
        for namespace, name in objects:
            if (namespace, name) in shared:
                continue
            if not _object_wanted(served, namespace, name):
                kube.delete(kind, namespace, name)
                orphans.append(f"{kind.lower()}/{namespace}/{name}")
    wanted_claims = _wanted_claims(namespaces)
    for namespace, name in kube.managed(
        "PersistentVolumeClaim", namespaces, label_selector=kube.INSTANCE_SELECTOR
    ):
        if (namespace, name) not in wanted_claims:
            kube.delete("PersistentVolumeClaim", namespace, name)
            orphans.append(f"persistentvolumeclaim/{namespace}/{name}")
    return orphans


def _gang_objects_wanted() -> set[tuple[str, str]]:
    """The objects the members of a gang share (a cluster's headless Service, key Secret and
    files), of gangs with a member that is not terminated."""
    live = (
        Instance.objects.exclude(status=S.TERMINATED)
        .exclude(k8s_name="")
        .exclude(holding__gang="")
        .values_list("k8s_namespace", "holding__gang")
        .distinct()
    )
    return {
        (namespace, name)
        for namespace, gang in live
        for _kind, name in gang_hooks().shared_objects(gang)
    }


def _object_wanted(served: dict[tuple[str, str], set[int]], namespace: str, name: str) -> bool:
    """Whether an instance that is not terminated wants this Service, Secret or HTTPRoute: its
    SSH Service, its access Secret, or the Service and route of a port it serves now."""
    port_object = manifests.port_object_parse(name)
    if port_object is not None:
        instance, port = port_object
        return port in served.get((namespace, instance), set())
    return (namespace, name.removesuffix("-access")) in served


def _wanted_claims(namespaces: list[str]) -> set[tuple[str, str]]:
    """Claims a row wants, and a pvc:// public pool's claim in every tenant namespace."""
    wanted = {
        (namespace, name(instance_id))
        for namespace, instance_id in Instance.objects.exclude(status=S.TERMINATED)
        .exclude(k8s_name="")
        .values_list("k8s_namespace", "id")
        for name in (manifests.disk_name, manifests.system_disk_name)
    }
    wanted |= set(
        Disk.objects.exclude(status=DiskStatus.DELETED)
        .exclude(k8s_name="")
        .values_list("k8s_namespace", "k8s_name")
    )
    for tenant_id, name in SharedStorage.objects.exclude(
        status=SharedStorage.Status.DELETED
    ).values_list("tenant_id", "k8s_name"):
        wanted.add((kube.namespace_name(tenant_id), name))
    scheme, _sep, pool = settings.PUBLIC_POOL_SOURCE.partition("://")
    if scheme == "pvc":
        wanted |= {(namespace, pool) for namespace in namespaces}
    return wanted


def _mirror_warnings() -> int:
    """Warnings about running pods (OOMKilled, BackOff, FailedMount …) join the instance's
    timeline once each, whatever the phase: one list call for the whole cluster."""
    by_pod: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for event in kube.warning_events():
        involved = event.get("involvedObject") or {}
        key = (involved.get("namespace") or "", involved.get("name") or "")
        by_pod.setdefault(key, []).append(event)
    if not by_pod:
        return 0
    mirrored = 0
    live = Instance.objects.filter(status__in=(S.RUNNING, S.CHECKING, S.PROVISIONING)).exclude(
        k8s_name=""
    )
    rows = live.select_related("pod_watch").only(
        "id",
        "status",
        "k8s_namespace",
        "k8s_name",
        "pod_watch__pod_uid",
        "pod_watch__seen_event_uids",
    )
    for instance in rows:
        events = by_pod.get((instance.k8s_namespace, instance.k8s_name))
        if events:
            mirrored += events_record(instance, events)
    return mirrored
