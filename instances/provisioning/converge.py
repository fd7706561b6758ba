"""Converging an instance's objects on the cluster with what the database wants, the way a
controller does. Each provisioning creates the instance's objects once (its pod watch records
when, in objects_created_at), then only watches the pod, one read a poll and its events every
EVENTS_EVERY_S, until it is ready or cannot start; a stop or terminate asks once for the pod to
go and watches it go. Every create is an "ensure" (409 → read and compare), so a pass cut short
by a crash, or run alongside the reconcile loop, is safe to run again. Retryable cluster errors
propagate to the task, which retries with backoff; permanent ones fail the instance with a
message the user can act on. Failed provisioning is never billed.

This module only talks to the cluster: what it saw is reported to the state machine
(instances.states), which changes the instance's status."""

import functools
import logging
import math
import posixpath
import secrets
from collections.abc import Callable
from datetime import UTC, timedelta
from typing import Any, NoReturn, TypeVar

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, QuerySet, Value, When
from django.utils import timezone

from compute.holdings import holding_of
from fleet.choices import NodeState
from fleet.models import DEFAULT_REGION, Node
from fleet.selectors import region_scope
from instances.choices import InstanceStatus
from instances.gangs import gang_hooks, gang_members, gang_of
from instances.gateway import served_ports
from instances.models import Instance, InstanceEvent, PodWatch, Workload
from instances.preemption import PREEMPTED
from instances.provisioning import manifests
from instances.provisioning.logs import log_ship
from instances.provisioning.namespaces import (
    http_ports_by_tenant,
    policy_fingerprint,
    tenant_network_policy_converge,
    tenant_policy_converge,
)
from instances.states import (
    instance_fail,
    instance_lock,
    instance_mark_running,
    instance_mark_stopped,
    instance_mark_terminated,
)
from starverse.accounts.models import SshKey, User
from starverse.accounts.teams import usable_by
from starverse.core import kube
from starverse.core.hostkeys import host_key_from_private, host_key_generate
from starverse.core.text import later
from storage import manifests as storage_manifests
from storage import provisioning as storage
from storage.models import Disk, SharedStorage

logger = logging.getLogger(__name__)
S = InstanceStatus
T = TypeVar("T")
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
# How often a pending pod's Kubernetes events are read (they are the user's progress).
EVENTS_EVERY_S = 5


class StillPending(Exception):
    """The pod is not ready (or not gone) yet; check again shortly."""


class CloneFailed(Exception):
    """A clone's volumes cannot be copied from its source's (instances.clones)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def in_its_region(function: Callable[[str], T]) -> Callable[[str], T]:
    """Run a step for one instance (by id) against its region's cluster: every kube call of
    an instance goes to the cluster its node, and so its objects, are in."""

    @functools.wraps(function)
    def wrapper(instance_id: str) -> T:
        region = Instance.objects.filter(pk=instance_id).values_list("region", flat=True).first()
        with region_scope(region):
            return function(instance_id)

    return wrapper


@in_its_region
def provision(instance_id: str) -> str:
    """Create a provisioning instance's objects once, then watch its pod: the instance is
    reported running when the pod is ready, failed when it cannot start. Returns the instance's
    status; raises StillPending while the pod starts."""
    instance = (
        Instance.objects.select_related(
            "offering", "image", "node", "holding", "pod_watch", "workload"
        )
        .filter(pk=instance_id)
        .first()
    )
    if instance is None or instance.status != S.PROVISIONING or instance.node is None:
        return instance.status if instance else "gone"
    node = instance.node
    if instance.pod_watch.objects_created_at is None:
        try:
            _objects_create(instance, node)
        except kube.NamespaceGone as error:
            # deleted since it was made sure of (a gang's members trust it for a round): the
            # next pass makes sure of it again, and of what its gang shares
            if gang := gang_of(instance):
                gang_hooks().shared_forget(gang)
            raise StillPending(str(error)) from error
        except kube.PermanentKubeError as error:
            return instance_fail(
                instance.id,
                later(
                    "The cluster refused the instance: %(error)s. It was not billed; "
                    "try again or contact support."
                )
                % {"error": error},
            )
        except CloneFailed as error:
            return instance_fail(instance.id, error.message)
    return _pod_watch(instance, node)


def _objects_create(instance: Instance, node: Node) -> None:
    """Everything the instance needs on the cluster, created once per provisioning: the
    tenant's namespace, the worker's RoleBinding and the network policy (brought up to date
    when the platform's policy changed since they were made), a pvc:// public pool's claim, the
    access Secret (rendered afresh: keys may have changed since the last start), the instance's
    disk and system disk, its cloud disks' and NAS claims, its pod pinned to its node, its SSH
    Service, and a Service and a gateway route for each HTTP port it serves. Then the row
    records that they exist."""
    _names_assign(instance)
    _namespace_objects_ensure(instance, node)
    pool = manifests.public_pool_claim(instance.tenant_id)
    if pool is not None:
        kube.ensure(pool, read_first=True)  # the tenant's, made by its first instance
    host_key_assign(instance)
    kube.ensure(_access_secret(instance), update=True)
    _claims_ensure(instance)
    disks, nas = _storage(instance)
    pod_manifest = manifests.pod(instance, node.name, disks, nas)
    service_manifest = manifests.service(instance)
    if gang_of(instance):
        pod_manifest, service_manifest = gang_hooks().pod(
            instance, node, pod_manifest, service_manifest
        )
    pod = kube.ensure(pod_manifest)
    if _node_of(pod) != node.name or _attempt_of(pod) != _attempt_of(pod_manifest):
        _pod_elsewhere_remove(instance)
    service = kube.ensure(service_manifest)
    ports = {p["name"]: p.get("nodePort") for p in service.get("spec", {}).get("ports", [])}
    for port in served_ports(_ports_now(instance)):
        _port_objects_ensure(instance, port)
    # only for the provisioning that created them: a later one creates its own; under the
    # instance's lock, which covers its pod watch (instance_lock: a transition holding the
    # instance and saving the pod watch would otherwise wait on us as we wait on it)
    with transaction.atomic():
        instance_lock(instance.pk)
        if _this_provisioning(instance).update(objects_created_at=timezone.now()):
            Instance.objects.filter(pk=instance.pk).update(ssh_port=ports.get("ssh"))
            # one more pod has run its program: the next pod's STARVERSE_RESTART_COUNT
            Workload.objects.filter(instance_id=instance.pk).update(pods_made=F("pods_made") + 1)


def _namespace_objects_ensure(instance: Instance, node: Node) -> None:
    """The tenant's namespace, RoleBindings and NetworkPolicies brought up to date; for one of
    a gang, with the objects the gang shares, through its owner, which makes sure of them once
    a round (the first member to start) and lets the others trust them (GangHooks)."""
    tenant = instance.tenant_id
    http_ports = http_ports_by_tenant(tenant)
    if gang_of(instance):
        gang_hooks().shared_ensure(
            instance,
            node,
            tenant_fingerprint=policy_fingerprint(tenant, http_ports),
            tenant_converge=functools.partial(tenant_policy_converge, tenant, http_ports),
        )
    else:
        tenant_policy_converge(tenant, http_ports)


def _claims_ensure(instance: Instance) -> None:
    """The instance's own disk and system disk claims. A clone's, on its first start, are
    restored from snapshots of its source's volumes (instances.clones), made once those are
    ready; on later starts they exist, and are its own."""
    claims = [manifests.disk_claim(instance), manifests.system_disk_claim(instance)]
    system = manifests.system_disk_name(instance.id)
    if instance.cloned_from and not kube.read(
        "PersistentVolumeClaim", instance.k8s_namespace, system
    ):
        _clone_snapshots_ready(instance)
        claims = [manifests.restored(claim) for claim in claims]
    for claim in claims:
        kube.ensure(claim)


def _clone_snapshots_ready(instance: Instance) -> None:
    """Make sure the snapshots of the clone's source's volumes exist (each made once, named as
    the clone's claim it fills); StillPending until both are ready to restore from."""
    waiting = False
    for claim, source_claim in manifests.clone_sources(instance):
        snapshot = kube.ensure(manifests.clone_snapshot(instance, claim, source_claim))
        status = snapshot.get("status") or {}
        if not status.get("readyToUse"):
            found = kube.read("VolumeSnapshot", instance.k8s_namespace, claim) or {}
            status = found.get("status") or {}
        error = (status.get("error") or {}).get("message")
        if error:
            raise CloneFailed(
                later(
                    "The copy of the disks of %(source)s failed: %(error)s. It was not billed; "
                    "clone it again while it is running or stopped."
                )
                % {"source": instance.cloned_from, "error": error}
            )
        waiting = waiting or not status.get("readyToUse")
    if waiting:
        raise StillPending("snapshots of the clone's source")


def _clone_snapshots_delete(instance: Instance) -> None:
    """A clone's snapshots of its source, once its claims hold their copy (404s are done)."""
    if instance.cloned_from and instance.k8s_namespace:
        for claim, _source in manifests.clone_sources(instance):
            kube.delete("VolumeSnapshot", instance.k8s_namespace, claim)


def _this_provisioning(instance: Instance) -> QuerySet[PodWatch]:
    """The instance's pod watch as long as it is still the provisioning `instance` was read
    in (a later one starts it afresh)."""
    return PodWatch.objects.filter(
        instance_id=instance.pk, provisioning_since=instance.pod_watch.provisioning_since
    )


def _ports_now(instance: Instance) -> Instance:
    """The instance with its ports as the database holds them now (they change while it
    provisions; the ports task waits for the objects, then brings the routes in line)."""
    instance.ports = Instance.objects.values_list("ports", flat=True).get(pk=instance.pk)
    return instance


def _port_objects_ensure(instance: Instance, port: int) -> None:
    kube.ensure(manifests.port_service(instance, port))
    kube.ensure(manifests.http_route(instance, port))


@in_its_region
def ports_converge(instance_id: str) -> list[str]:
    """Bring an instance's gateway objects in line with the ports it declares now: a Service
    and an HTTPRoute made for each port added, deleted for each port gone (one list of each
    kind finds them), and the tenant's NetworkPolicy let through what its instances declare.
    A provisioning whose objects are not made yet makes them with the ports of the moment, so
    this waits for it (StillPending). Returns what changed, as kind/name."""
    instance = Instance.objects.select_related("pod_watch").filter(pk=instance_id).first()
    if instance is None or not instance.k8s_name:
        return []
    if instance.status == S.PROVISIONING and instance.pod_watch.objects_created_at is None:
        raise StillPending("objects not created yet")
    if instance.status not in (S.PROVISIONING, S.CHECKING, S.RUNNING, S.STOPPING, S.STOPPED):
        return []  # queued or failed: the next provisioning makes them
    namespace, selector = instance.k8s_namespace, manifests.port_selector(instance)
    wanted = set(served_ports(instance))
    changed = []
    for kind in ("HTTPRoute", "Service"):
        have = {}
        for _ns, name in kube.managed(kind, [namespace], label_selector=selector):
            parsed = manifests.port_object_parse(name)
            if parsed is not None:
                have[parsed[1]] = name
        for port in sorted(wanted - set(have)):
            manifest = (
                manifests.http_route(instance, port)
                if kind == "HTTPRoute"
                else manifests.port_service(instance, port)
            )
            kube.ensure(manifest)
            changed.append(f"{kind}/{manifest['metadata']['name']}")
        for port in sorted(set(have) - wanted):
            kube.delete(kind, namespace, have[port])
            changed.append(f"{kind}/{have[port]}")
    tenant_network_policy_converge(instance.tenant_id)
    if changed:
        logger.info("gateway.ports_converged instance=%s changed=%s", instance.id, changed)
    return changed


def _port_objects_delete(instance: Instance) -> None:
    """Every gateway route and port Service of the instance, whatever ports it had."""
    selector = manifests.port_selector(instance)
    for kind in ("HTTPRoute", "Service"):
        for namespace, name in kube.managed(
            kind, [instance.k8s_namespace], label_selector=selector
        ):
            kube.delete(kind, namespace, name)


def _names_assign(instance: Instance) -> None:
    """The instance's deterministic object names (and its Jupyter token), stored on the row
    before anything is created, so a terminate finds whatever a cut-short pass left."""
    if instance.k8s_name:
        return
    instance.k8s_namespace = kube.namespace_name(instance.tenant_id)
    instance.k8s_name = manifests.instance_name(instance.id)
    instance.jupyter_token = instance.jupyter_token or secrets.token_urlsafe(24)
    Instance.objects.filter(pk=instance.pk).update(
        k8s_namespace=instance.k8s_namespace,
        k8s_name=instance.k8s_name,
        jupyter_token=instance.jupyter_token,
    )


@in_its_region
def access_refresh(instance_id: str) -> bool:
    """Render an instance's access Secret again from the keys that exist now (a key was added
    or deleted): a running container re-reads the mounted Secret, so a deleted key stops
    opening it within a minute and no restart is needed. Only for an instance whose objects
    exist; a later start renders the Secret anyway. Returns whether it wrote one."""
    instance = Instance.objects.select_related("pod_watch").filter(pk=instance_id).first()
    if instance is None or not instance.k8s_name or instance.pod_watch.objects_created_at is None:
        return False
    if instance.status not in (S.PROVISIONING, S.CHECKING, S.RUNNING):
        return False
    kube.ensure(_access_secret(instance), update=True)
    return True


def host_key_assign(instance: Instance) -> None:
    """The instance's SSH host key, made once, at its first provisioning, and kept for its life
    (every later start renders the same key into its Secret, so the host the user's known_hosts
    holds stays the same across stop/start and a move to another node). A pass that races
    another keeps whichever key was stored first."""
    host_keys_assign([instance])


def host_keys_assign(instances: list[Instance]) -> None:
    """host_key_assign for several instances (a cluster's ranks) at once: the keys of those that
    have none are generated and stored by one UPDATE, then read back by one query (a pass that
    races another keeps whichever key was stored first); nothing is asked of the database when
    they all have one."""
    missing = [instance for instance in instances if not instance.ssh_host_key]
    if not missing:
        return
    keys = {instance.pk: host_key_generate() for instance in missing}
    Instance.objects.filter(pk__in=keys, ssh_host_key="").update(
        ssh_host_key=Case(*(When(pk=pk, then=Value(k.private_openssh)) for pk, k in keys.items())),
        ssh_host_key_fingerprint=Case(
            *(When(pk=pk, then=Value(k.fingerprint)) for pk, k in keys.items())
        ),
    )
    stored = Instance.objects.filter(pk__in=keys).values_list(
        "pk", "ssh_host_key", "ssh_host_key_fingerprint"
    )
    by_pk = {instance.pk: instance for instance in missing}
    for pk, private, fingerprint in stored:
        instance = by_pk[pk]
        instance.ssh_host_key, instance.ssh_host_key_fingerprint = private, fingerprint
        logger.info("instance.host_key instance=%s fingerprint=%s", pk, fingerprint)


def _access_secret(instance: Instance) -> dict[str, Any]:
    """The instance's access Secret as it should be now: the keys that may log in, its Jupyter
    token and its SSH host key."""
    host_key = host_key_from_private(instance.ssh_host_key) if instance.ssh_host_key else None
    return manifests.ssh_secret(
        instance, _authorized_keys(instance), instance.jupyter_token, host_key
    )


def _authorized_keys(instance: Instance) -> str:
    """The keys of whoever ordered it (a team's instance takes its orderer's, not every
    member's), only while they may use it: none once they left the team, lost the right by a
    demotion or were deactivated. Read at every render, so keys a removed member adds to their
    own account later never reach the team's instances."""
    orderer = User.objects.filter(pk=instance.created_by_id, is_active=True).first()
    if orderer is None or not usable_by(orderer, instance):
        return "\n"
    keys = SshKey.objects.filter(user_id=orderer.pk)
    if instance.ssh_key_ids:
        keys = keys.filter(pk__in=instance.ssh_key_ids)
    return "\n".join(keys.values_list("public_key", flat=True)) + "\n"


def _storage(instance: Instance) -> tuple[list[Disk], SharedStorage | None]:
    """The instance's attached cloud disks and its tenant's shared NAS, their claims made sure
    of (a disk's creation task may not have run yet). The NAS lives in the default region's
    cluster: instances of other regions do not mount it."""
    disks = list(Disk.objects.filter(instance_id=instance.id).order_by("name"))
    for disk in disks:
        storage.claim_converge(storage_manifests.cloud_disk_claim(disk))
    nas = None
    if instance.region_id in (None, DEFAULT_REGION):
        nas = SharedStorage.objects.filter(
            tenant_id=instance.tenant_id, status__in=SharedStorage.LIVE
        ).first()
    if nas is not None:
        storage.claim_converge(storage_manifests.nas_claim(nas))
    return disks, nas


def _node_of(pod: dict[str, Any]) -> str | None:
    return (pod.get("spec") or {}).get("nodeName")


def _attempt_of(pod: dict[str, Any]) -> str | None:
    """The attempt of the program a pod runs (manifests.ATTEMPT_ANNOTATION), None for one that
    runs none."""
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(manifests.ATTEMPT_ANNOTATION)


def _pod_elsewhere_remove(instance: Instance) -> NoReturn:
    """A pod of the instance's name sits on another node (the one it lost), or runs an earlier
    attempt of its program (a multi-node job's rank started again on its node): free its GPUs
    and volumes at once; the next poll creates the instance's objects again."""
    kube.delete("Pod", instance.k8s_namespace, instance.k8s_name, force=True)
    _objects_forget(instance)
    raise StillPending("old pod on another node deleted")


def _objects_forget(instance: Instance) -> None:
    """The next poll of this provisioning creates the instance's objects again."""
    _this_provisioning(instance).update(objects_created_at=None)


def _pod_watch(instance: Instance, node: Node) -> str:
    """One poll of a provisioning instance whose objects exist: one read of its pod, and a
    report when the pod is ready or cannot start. Its events are read when due, and once more
    before a report, so the timeline tells the whole story first."""
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    if pod is None:
        _objects_forget(instance)  # gone while starting (deleted by hand, evicted)
        raise StillPending("pod gone")
    if _node_of(pod) != node.name:
        _pod_elsewhere_remove(instance)
    _pod_uid_learn(instance, pod)
    status = pod.get("status") or {}
    if _program_ran(pod):
        # a program that runs to its end ended before this poll saw it ready: it ran (the
        # workloads check reads its exit code), its start did not fail
        events_mirror(instance)
        return instance_mark_running(instance.id)
    failure = _start_failure(status)
    ready = failure is None and _ready(status)
    if failure is None and not ready:
        failure = _timed_out(instance)
    if failure is not None or ready or _events_due(instance):
        events_mirror(instance)
    if failure is not None:
        return instance_fail(instance.id, failure)
    if ready:
        _clone_snapshots_delete(instance)
        return instance_mark_running(instance.id)
    raise StillPending(status.get("phase") or "Pending")


def _program_ran(pod: dict[str, Any]) -> bool:
    """A pod that runs a program to its end (restartPolicy Never: instances.Workload) whose
    program started and ended: its container terminated after it had started."""
    if (pod.get("spec") or {}).get("restartPolicy") != "Never":
        return False
    status = pod.get("status") or {}
    return status.get("phase") in ("Succeeded", "Failed") and any(
        ((c.get("state") or {}).get("terminated") or {}).get("startedAt")
        for c in status.get("containerStatuses") or []
    )


def _start_failure(status: dict[str, Any]) -> str | None:
    """Why the pod cannot start (its image cannot be pulled, the runtime cannot run it, its
    container failed), if so: init containers (the system disk's seeding runs the image
    first) as well as the main one."""
    containers = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILURES:
            return later(
                "The image %(image)s could not be pulled (%(reason)s). It was not "
                "billed; choose another image or try again later."
            ) % {"image": container.get("image"), "reason": waiting["reason"]}
    for container in containers:
        cannot = _cannot_run(container)
        if cannot is not None:
            return later(
                "The image %(image)s cannot run here (%(reason)s: %(message)s). An image "
                "needs a POSIX shell at /bin/sh and to be built for the node's CPU "
                "architecture. It was not billed; choose another image."
            ) % {"image": container.get("image"), **cannot}
    for container in containers:
        refused = _init_refused(container)
        if refused is not None:
            return later(
                "The image %(image)s cannot run the platform's init: %(message)s. It was not "
                "billed; choose another image, or add what is missing to it."
            ) % {"image": container.get("image"), "message": refused}
    for container in status.get("initContainerStatuses") or []:
        failed = _init_container_failed(container)
        if failed is not None:
            return later(
                "The instance's start step %(name)s failed (exit code %(code)s: %(message)s). "
                "It was not billed; try again, or contact support if it fails again."
            ) % {"name": container.get("name"), **failed}
    if status.get("phase") == "Failed":
        return later("The instance's container failed to start: %(reason)s.") % {
            "reason": status.get("reason") or status.get("message") or "unknown"
        }
    return None


# The runtime could not run the container's command at all (no /bin/sh, exec format error, a
# missing program): reasons of its waiting state, and of its (last) termination.
CANNOT_CREATE = ("CreateContainerError", "RunContainerError")
CANNOT_START = ("StartError", "ContainerCannotRun")


def _cannot_run(container: dict[str, Any]) -> dict[str, str] | None:
    """{reason, message} when the runtime cannot run this container, else None."""
    waiting = (container.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in CANNOT_CREATE:
        return {"reason": waiting["reason"], "message": waiting.get("message") or ""}
    for state in (container.get("state") or {}, container.get("lastState") or {}):
        ended = state.get("terminated") or {}
        if ended.get("reason") in CANNOT_START:
            return {"reason": ended["reason"], "message": ended.get("message") or ""}
    return None


def _ended(container: dict[str, Any]) -> list[dict[str, Any]]:
    """The container's terminations the kubelet reports: the current one and the last."""
    states = (container.get("state") or {}, container.get("lastState") or {})
    return [state["terminated"] for state in states if state.get("terminated")]


def _init_refused(container: dict[str, Any]) -> str | None:
    """The reason the platform's entrypoint gave for not starting the image (its termination
    message, exit code manifests.ENTRYPOINT_REFUSED_EXIT), if it refused."""
    for ended in _ended(container):
        if ended.get("exitCode") == manifests.ENTRYPOINT_REFUSED_EXIT:
            return (ended.get("message") or "").strip() or "no reason given"
    return None


def _init_container_failed(container: dict[str, Any]) -> dict[str, Any] | None:
    """{code, message} of an init container (the toolset's copy, the system disk's seeding)
    that exited with an error: the pod would only retry it in a loop."""
    for ended in _ended(container):
        code = ended.get("exitCode")
        if code and ended.get("reason") not in CANNOT_START:
            message = (ended.get("message") or "").strip() or ended.get("reason") or "Error"
            return {"code": code, "message": message}
    return None


def _ready(status: dict[str, Any]) -> bool:
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _timed_out(instance: Instance) -> str | None:
    since = instance.pod_watch.provisioning_since or instance.created_at
    if timezone.now() - since > timedelta(seconds=settings.PROVISIONING_TIMEOUT_S):
        return later("The instance did not start within %(m)d minutes. It was not billed.") % {
            "m": settings.PROVISIONING_TIMEOUT_S // 60
        }
    return None


def _pod_uid_learn(instance: Instance, pod: dict[str, Any]) -> None:
    """The pod this provisioning watches, by its uid: only its events join the timeline."""
    uid = (pod.get("metadata") or {}).get("uid") or ""
    watch = instance.pod_watch
    if uid and watch.pod_uid != uid:
        with transaction.atomic():  # the pod watch changes under its instance's lock
            instance_lock(instance.pk)
            PodWatch.objects.filter(instance_id=instance.pk).update(pod_uid=uid)
        watch.pod_uid = uid


def _events_due(instance: Instance) -> bool:
    read_at = instance.pod_watch.events_read_at
    return read_at is None or timezone.now() - read_at >= timedelta(seconds=EVENTS_EVERY_S)


def events_mirror(instance: Instance) -> None:
    """Kubernetes events of the instance's pod become its progress events, once each."""
    try:
        events = kube.events_for(instance.k8s_namespace, instance.k8s_name)
    except kube.KubeError:
        return
    PodWatch.objects.filter(instance_id=instance.pk).update(events_read_at=timezone.now())
    events_record(instance, events)


def _of_pod(event: dict[str, Any], pod_uid: str) -> bool:
    """Whether the event is about the watched pod. Events are listed by the pod's name, which
    the pod before a restart had too: its last events (Killing, a late BackOff) are not this
    run's. An event or a watch without a uid (one from before uids were kept) is taken."""
    uid = (event.get("involvedObject") or {}).get("uid") or ""
    return not (uid and pod_uid) or uid == pod_uid


def events_record(instance: Instance, events: list[dict[str, Any]]) -> int:
    """Record the events of the watched pod not seen before on the instance's timeline, in the
    cluster's words (Kubernetes speaks English; instances.timeline tells them in the reader's
    language); returns how many were new."""
    watch = instance.pod_watch
    seen_before = watch.seen_event_uids
    seen = set(seen_before)
    new = [
        e
        for e in sorted(events, key=lambda e: e.get("lastTimestamp") or "")
        if e["metadata"]["uid"] not in seen and _of_pod(e, watch.pod_uid)
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
        PodWatch.objects.filter(instance_id=instance.pk).update(
            seen_event_uids=[*seen_before, *(e["metadata"]["uid"] for e in new)][-200:]
        )
    return len(new)


def _pod_gone(instance: Instance) -> bool:
    """Ask once for the pod to go, then watch it go: its GPUs are free only once it has. A pod
    on a node that is down is removed at once (its kubelet would never confirm)."""
    if not instance.k8s_name:
        return True
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    if pod is None:
        return True
    if Node.objects.filter(name=_node_of(pod), state=NodeState.DOWN).exists():
        kube.delete("Pod", instance.k8s_namespace, instance.k8s_name, force=True)
        return True
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        _workload_log_keep(instance, pod)
        if instance.stop_reason == PREEMPTED:
            _preempt_notice(instance)
        else:
            kube.delete("Pod", instance.k8s_namespace, instance.k8s_name)
    return False


# Where a preempted spot container finds its deadline (ISO 8601, UTC, one line).
PREEMPT_FILE = "/etc/starverse/preempt"


def _preempt_notice(instance: Instance) -> None:
    """A spot instance taken back (instances.preemption): its container gets the deadline in
    PREEMPT_FILE (pods/exec, as the pre-flight runs; best effort: a container without a
    shell still gets the signal), then SIGTERM through the pod's graceful deletion with the
    time left to the deadline, after which the kubelet kills it and its GPUs are free."""
    deadline = holding_of(instance.id).preempt_at or timezone.now()
    stamp = deadline.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    script = f"mkdir -p {posixpath.dirname(PREEMPT_FILE)} && echo {stamp} > {PREEMPT_FILE}"
    try:
        kube.exec_run(
            instance.k8s_namespace,
            instance.k8s_name,
            container=manifests.CONTAINER,
            command=["sh", "-c", script],
            timeout=5,
        )
    except (kube.PermanentKubeError, kube.RetryableKubeError, kube.ExecTimeout) as error:
        logger.warning("spot.notice_failed instance=%s error=%s", instance.id, error)
    left = max(0, math.ceil((deadline - timezone.now()).total_seconds()))
    kube.delete("Pod", instance.k8s_namespace, instance.k8s_name, grace_s=left)


def _workload_log_keep(instance: Instance, pod: dict[str, Any]) -> None:
    """A pod that ran a program to its end: the rest of its output is shipped before the pod
    goes (instances.provisioning.logs), into the row of the attempt its
    STARVERSE_RESTART_COUNT says."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if manifests.WORKLOAD_LABEL not in labels:
        return
    env = {
        item.get("name"): item.get("value")
        for item in (pod["spec"]["containers"][0].get("env") or [])
    }
    attempt = int(env.get("STARVERSE_RESTART_COUNT") or 0)
    log_ship(instance.pk, instance.k8s_namespace, instance.k8s_name, attempt=attempt, final=True)


def _last_events_mirror(instance: Instance) -> None:
    """Once its pod is gone, the pod's last events (Killing) join the timeline where they
    happened, before the instance is reported stopped: one read, of a pod known by its uid."""
    if instance.k8s_name and instance.pod_watch.pod_uid:
        events_mirror(instance)


@in_its_region
def stop(instance_id: str) -> str:
    """Delete the pod (the disk, Secret and Service stay); once it is gone the instance is
    reported stopped."""
    instance = Instance.objects.filter(pk=instance_id).first()
    if instance is None or instance.status != S.STOPPING:
        return instance.status if instance else "gone"
    if not _pod_gone(instance):
        raise StillPending("pod terminating")
    _last_events_mirror(instance)
    return instance_mark_stopped(instance.id)


@in_its_region
def terminate(instance_id: str) -> str:
    """Delete everything the instance had on the cluster (its gateway routes and Services,
    its system disk, its own disk only if not kept), then report it terminated; 404s count as
    done."""
    instance = Instance.objects.filter(pk=instance_id).first()
    if instance is None or instance.status != S.TERMINATING:
        return instance.status if instance else "gone"
    if not _pod_gone(instance):
        raise StillPending("pod terminating")
    _last_events_mirror(instance)
    claim = manifests.disk_name(instance.id)
    if instance.k8s_name:
        _port_objects_delete(instance)
        objects = [
            ("Service", instance.k8s_name),
            ("Secret", f"{instance.k8s_name}-access"),
            ("PersistentVolumeClaim", manifests.system_disk_name(instance.id)),
        ]
        if not instance.keep_disk:
            objects.append(("PersistentVolumeClaim", claim))
        for kind, name in objects:
            kube.delete(kind, instance.k8s_namespace, name)
        _clone_snapshots_delete(instance)
        if (gang := gang_of(instance)) and _last_member(instance, gang):
            for kind, name in gang_hooks().shared_objects(gang):
                kube.delete(kind, instance.k8s_namespace, name)
    return instance_mark_terminated(instance.id, disk_claim=claim)


def _last_member(instance: Instance, gang: str) -> bool:
    """Whether every other member of the instance's gang is going or gone too (members that
    terminate together may each delete the shared objects: a 404 is success)."""
    return not (
        gang_members(gang)
        .exclude(pk=instance.pk)
        .exclude(status__in=(S.TERMINATING, S.TERMINATED))
        .exists()
    )
