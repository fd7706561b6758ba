"""The endpoints' scheduler and meter, one pass a second (endpoints.tasks.sync_endpoints), all
of it rebuilt from the cluster's pods each pass, so a restarted worker picks up where the last
one stopped.

- Placing: an endpoint's pods name our scheduler (`schedulerName: starverse-endpoints`), so
  kube-scheduler leaves them Pending whoever made them (the autoscaler adds them). A pass
  places each with the compute core's placement (compute.placement.choose) and holds its GPUs
  with the holding of a new EndpointReplica (compute.holdings), in one transaction, then binds
  the pod to the node (pods/binding). A bind the cluster refuses gives the GPUs back.
- Readiness and billing: a replica is billed per minute while its pod is Ready, at the
  offering's hourly price, by the compute core's meter (compute.metering: a session opens
  when the pod becomes Ready, its minutes posted by the hour under
  `endpoint:{replica}:{session}:{first}-{last}`); a pod that leaves Ready pays its started
  minute and its session closes. A replica that never became Ready costs nothing.
- Releasing: a replica whose pod is gone gives its GPUs back.
- Desired replicas: what the autoscaler (KEDA writes the Deployment's `spec.replicas`) or a
  manual scale last asked for, read from the endpoints' Deployments with one list call per
  namespace, as the pods are.
- Running out: a minute the balance cannot pay scales the endpoint to zero
  (services.endpoint_suspend, from the meter's tick: endpoints.metering), never deletes it; so
  does a spent monthly budget of its creator or its team, checked after every tick or pass
  that charged something (spent only grows by charges).
- No model: an engine container that exited with MODEL_MISSING_EXIT (the engine image's
  entry point found no `config.json` under /model) fails the endpoint, naming the field the
  user gave, and scales it to zero: restarting cannot make the folder appear."""

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from compute.choices import HoldingKind
from compute.holdings import holding_new, holding_release
from compute.metering import meter_close, meter_open
from compute.placement import choose
from endpoints import manifests
from endpoints.choices import LIVE, EndpointStatus, SourceKind
from endpoints.engines import MODEL_MISSING_EXIT
from endpoints.models import Endpoint, EndpointReplica
from endpoints.selectors import endpoint_region
from endpoints.services import endpoint_fail, endpoint_suspend, endpoints_over_budget_suspend
from events.choices import EventType
from events.emit import emit_about
from fleet.models import Region
from fleet.selectors import region_target
from starverse.core import kube
from starverse.core.db import insert_together

logger = logging.getLogger(__name__)
S = EndpointStatus


@dataclass
class SyncResult:
    bound: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    charged_fen: int = 0
    suspended: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # endpoint → the engine's message


def _ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _restarts(pod: dict[str, Any]) -> int:
    return sum(
        int(c.get("restartCount") or 0)
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _model_missing(pod: dict[str, Any]) -> str | None:
    """The termination message of a container that exited because it found no model (now, or
    on its last run before a restart), else None."""
    for item in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in (item.get("state") or {}, item.get("lastState") or {}):
            terminated = state.get("terminated") or {}
            if terminated.get("exitCode") == MODEL_MISSING_EXIT:
                return str(terminated.get("message") or "").strip()
    return None


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    return parse_datetime(value) if isinstance(value, str) else None


def _nothing_to_do() -> bool:
    """No endpoint in a live state and no replica holding GPUs: one query over two partial
    indexes (endpoint_live, endpoint_replica_held), so the beat costs next to nothing while
    nobody serves a model. A failed or deleted endpoint's pods are its replicas until they
    go, so those keep the pass running until their GPUs are given back."""
    live = Endpoint.objects.filter(status__in=LIVE).values_list("pk")
    held = EndpointReplica.objects.filter(gone_at__isnull=True).values_list("endpoint_id")
    return not live.union(held, all=True).exists()


def endpoints_sync(*, now: datetime | None = None) -> SyncResult:
    """One pass of the scheduler and meter (see the module's docstring): place and bind new
    pods, follow and bill the Ready ones, release the gone ones, then bring each endpoint's
    status, suspensions and failures in line with what the pass saw."""
    now = now or timezone.now()
    result = SyncResult()
    if _nothing_to_do():
        return result
    endpoints = _endpoints_followed()
    targets, pods, desired = _clusters_read(endpoints)
    replicas = {
        (r.endpoint_id, r.pod_name): r
        for r in EndpointReplica.objects.select_related("node").filter(
            endpoint__in=list(endpoints.values()), gone_at__isnull=True
        )
    }
    seen: set[tuple[str, str]] = set()
    ready_count: dict[str, int] = {}
    alive_count: dict[str, int] = {}
    stale: set[str] = set()  # endpoints with pods of an earlier generation still up
    for region, pod in pods:
        with _scope(targets, region):
            _pod_pass(pod, endpoints, replicas, seen, ready_count, alive_count, stale, now, result)
    for key, replica in replicas.items():
        if key not in seen:
            _release(replica, now, result)
    _statuses(endpoints.values(), ready_count, alive_count, stale, desired)
    for endpoint_id in result.suspended:
        endpoint_suspend(endpoint_id=endpoint_id)
    if result.charged_fen:
        result.over_budget = endpoints_over_budget_suspend(now=now)
    by_id = {e.id: e for e in endpoints.values()}
    for endpoint_id, detail in result.failed.items():
        with _scope(targets, endpoint_region(by_id[endpoint_id])):
            _fail_no_model(by_id[endpoint_id], detail)
    if result.bound or result.released or result.charged_fen:
        logger.info(
            "endpoints.sync bound=%d waiting=%d released=%d fen=%d",
            len(result.bound),
            len(result.waiting),
            len(result.released),
            result.charged_fen,
        )
    return result


def _endpoints_followed() -> dict[str, Endpoint]:
    """The endpoints a pass looks at, by their Kubernetes name: every one made in the cluster
    that is not deleted, and a deleted one while a replica of it still holds GPUs."""
    return {
        e.k8s_name: e
        for e in Endpoint.objects.select_related("offering__gpu_model", "source_disk")
        .filter(
            Q(k8s_name__gt="")
            & (~Q(status=S.DELETED) | Q(replicas__gone_at__isnull=True, replicas__isnull=False))
        )
        .distinct()
    }


class _ClustersRead(NamedTuple):
    """What a pass reads of the clusters: each region's target (those registered), the
    endpoints' pods with the region each runs in, and the replicas each endpoint's Deployment
    asks for, by its name."""

    targets: dict[str, kube.Target]
    pods: list[tuple[str, dict[str, Any]]]
    desired: dict[str, int]


def _clusters_read(endpoints: dict[str, Endpoint]) -> _ClustersRead:
    """The endpoints' pods and their Deployments' replicas, from each region's cluster in
    turn, in the regions' name order."""
    # each endpoint's pods are in its region's cluster: one list per namespace there
    by_region: dict[str, set[str]] = {}
    for endpoint in endpoints.values():
        by_region.setdefault(endpoint_region(endpoint), set()).add(endpoint.k8s_namespace)
    targets = {r.name: region_target(r) for r in Region.objects.filter(name__in=list(by_region))}
    pods: list[tuple[str, dict[str, Any]]] = []
    # what the autoscaler (or a manual scale) last wrote in each endpoint's Deployment
    desired: dict[str, int] = {}
    for region, namespaces in sorted(by_region.items()):
        with _scope(targets, region):
            listed = kube.pods_labelled(sorted(namespaces), manifests.ENDPOINT_LABEL)
            scales = kube.deployment_replicas(sorted(namespaces), manifests.ENDPOINT_LABEL)
        pods += [(region, pod) for pod in listed]
        desired.update({name: replicas for (_namespace, name), replicas in scales.items()})
    return _ClustersRead(targets, pods, desired)


def _scope(
    targets: dict[str, kube.Target], region: str
) -> AbstractContextManager[kube.Target | None]:
    """Calls go to the region's cluster; the default region's (or one not registered), to
    KUBECONFIG's."""
    target = targets.get(region)
    return kube.cluster(target) if target is not None else nullcontext()


def _pod_pass(
    pod: dict[str, Any],
    endpoints: dict[str, Endpoint],
    replicas: dict[tuple[str, str], EndpointReplica],
    seen: set[tuple[str, str]],
    ready_count: dict[str, int],
    alive_count: dict[str, int],
    stale: set[str],
    now: datetime,
    result: SyncResult,
) -> None:
    """One pod: placed and bound if new, followed (readiness, restarts, no model) if ours."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    endpoint = endpoints.get((meta.get("labels") or {}).get(manifests.ENDPOINT_LABEL, ""))
    if endpoint is None:
        return
    key = (endpoint.id, meta["name"])
    seen.add(key)
    if not meta.get("deletionTimestamp"):
        alive_count[endpoint.id] = alive_count.get(endpoint.id, 0) + 1
        generation = (meta.get("labels") or {}).get(manifests.GENERATION_LABEL)
        if generation != str(endpoint.generation):
            stale.add(endpoint.id)
        elif endpoint.status not in (S.FAILED, S.DELETING, S.DELETED):
            missing = _model_missing(pod)
            if missing is not None:
                result.failed[endpoint.id] = missing
    replica = replicas.get(key)
    if replica is None and not spec.get("nodeName"):
        if spec.get("schedulerName") == manifests.SCHEDULER_NAME and not meta.get(
            "deletionTimestamp"
        ):
            _place(endpoint, meta["namespace"], meta["name"], result)
        return
    if replica is None:
        return  # bound by an earlier worker whose rows are gone: nothing of ours holds it
    if not spec.get("nodeName") and replica.node is not None:
        # placed by a pass that stopped before its bind: bind it where its GPUs are held
        kube.pod_bind(meta["namespace"], meta["name"], replica.node.name)
        return
    ready = _ready(pod)
    if ready:
        ready_count[endpoint.id] = ready_count.get(endpoint.id, 0) + 1
    _follow(endpoint, replica, pod, ready, now, result)


def _fail_no_model(endpoint: Endpoint, detail: str) -> None:
    """Failed, naming the source field and its value; the autoscaler's bounds and the
    Deployment go to zero so the crash-looping pods give their GPUs back."""
    if endpoint.source_kind == SourceKind.DATASET:
        field_name, value = "source.dataset", endpoint.source_dataset
    else:
        field_name, value = "source.path", endpoint.source_path
    message = _(
        "No model at %(field)s “%(value)s”: the folder must hold a model's config.json "
        "(a Hugging Face checkpoint). Put the checkpoint there and update the endpoint, or "
        "make a new one with the right path."
    ) % {"field": field_name, "value": value or "/"}
    if detail:
        message += " " + _("The engine said: %(detail)s") % {"detail": detail}
    endpoint_fail(endpoint_id=endpoint.id, message=message)
    endpoint.status = S.FAILED
    kube.ensure(manifests.scaled_object(endpoint), update=True)
    kube.deployment_scale(endpoint.k8s_namespace, endpoint.k8s_name, 0)
    logger.info("endpoint.no_model endpoint=%s %s=%s", endpoint.id, field_name, value)


def _place(endpoint: Endpoint, namespace: str, pod_name: str, result: SyncResult) -> None:
    """Hold GPUs for the pod and bind it; the GPUs are given back if the bind is refused."""
    with transaction.atomic():
        placement = choose(endpoint.offering, endpoint_region(endpoint))
        if placement is None:
            result.waiting.append(pod_name)
            return
        node, indices = placement
        try:
            with transaction.atomic():
                replica = EndpointReplica.objects.create(
                    endpoint=endpoint, pod_name=pod_name, node_id=node.id
                )
        except IntegrityError:
            return  # a concurrent pass placed this pod first
        holding, held = holding_new(
            holding_id=replica.id,
            kind=HoldingKind.REPLICA,
            tenant_id=endpoint.tenant_id,
            created_by_id=endpoint.created_by_id,
            offering=endpoint.offering,
            parent=endpoint.pk,
            placement=(node, indices),
        )
        insert_together([holding, *held])
    if kube.pod_bind(namespace, pod_name, node.name):
        result.bound.append(pod_name)
        return
    with transaction.atomic():
        holding_release(replica.id)
        EndpointReplica.objects.filter(pk=replica.pk).update(gone_at=timezone.now())


def _follow(
    endpoint: Endpoint,
    replica: EndpointReplica,
    pod: dict[str, Any],
    ready: bool,
    now: datetime,
    result: SyncResult,
) -> None:
    restarts = _restarts(pod)
    changes: dict[str, Any] = {}
    if restarts != replica.restarts:
        changes["restarts"] = restarts
    # a deleting endpoint's replicas bill no more (endpoints.services.endpoint_delete closed
    # their sessions; one a pass that read the endpoint before opened meanwhile closes here)
    deleting = endpoint.status in (S.DELETING, S.DELETED)
    if ready and replica.ready_since is None and not deleting:
        changes.update(ready_since=now, session=replica.session + 1)
        created = _when(pod["metadata"].get("creationTimestamp"))
        if created is not None and replica.session == 0:
            Endpoint.objects.filter(pk=endpoint.pk).update(
                cold_start_s=round(max(0.0, (now - created).total_seconds()), 1)
            )
    elif (deleting or not ready) and replica.ready_since is not None:
        _meter_close(replica, now, result)
        changes.update(ready_since=None)
    if changes:
        with transaction.atomic():
            # only from the row this pass read: another pass running at once (beat's, a
            # backlog's) that moved it first has opened the session and counted the restarts
            moved = EndpointReplica.objects.filter(
                pk=replica.pk,
                session=replica.session,
                ready_since=replica.ready_since,
                restarts=replica.restarts,
            ).update(**changes)
            if not moved:
                return
            if "restarts" in changes:
                Endpoint.objects.filter(pk=endpoint.pk).update(
                    restarts=F("restarts") + max(0, restarts - replica.restarts)
                )
            if "session" in changes:
                key = f"endpoint:{replica.id}:{changes['session']}"
                meter_open(replica.id, key=key, since=now)


def _release(replica: EndpointReplica, now: datetime, result: SyncResult) -> None:
    _meter_close(replica, now, result)
    with transaction.atomic():
        holding_release(replica.id)
        EndpointReplica.objects.filter(pk=replica.pk).update(gone_at=now, ready_since=None)
    result.released.append(replica.pod_name)


def _meter_close(replica: EndpointReplica, now: datetime, result: SyncResult) -> None:
    """The replica stops serving: its session's minutes (the started one too) are posted, then
    added to its endpoint's cost once that has committed (the endpoint's row is locked before
    the wallet by its own services, so it is not waited for while the wallet is held)."""
    spent = meter_close(replica.id, now=now)
    if spent:
        Endpoint.objects.filter(pk=replica.endpoint_id).update(cost_fen=F("cost_fen") + spent)
    result.charged_fen += spent


def _statuses(
    endpoints: Any,
    ready_count: dict[str, int],
    alive_count: dict[str, int],
    stale: set[str],
    desired: dict[str, int],
) -> None:
    """Each endpoint's status from its pods: running with a Ready replica, scaled to zero with
    none wanted, updating until its newest generation serves; its desired replicas from its
    Deployment (the autoscaler's count, not the platform's last write)."""
    for endpoint in endpoints:
        wanted = desired.get(endpoint.k8s_name)
        if (
            endpoint.status != S.DELETED
            and wanted is not None
            and wanted != endpoint.replicas_desired
        ) and (
            Endpoint.objects.filter(pk=endpoint.pk, replicas_desired=endpoint.replicas_desired)
            .exclude(status=S.DELETED)
            .update(replicas_desired=wanted)
        ):
            emit_about(endpoint, EventType.ENDPOINT_SCALED, replicas=wanted)
        ready, alive = ready_count.get(endpoint.id, 0), alive_count.get(endpoint.id, 0)
        status = endpoint.status
        if status in (S.DELETING, S.DELETED, S.FAILED):
            continue
        # a Ready pod says nothing of the Service and route: only once converge has made
        # sure of this generation's every object (a converge cut short after the Deployment
        # left one running with no Service, found by the chaos drill)
        converged = endpoint.converged_generation >= endpoint.generation
        if (
            ready
            and status in (S.PROVISIONING, S.SCALED_TO_ZERO)
            and not endpoint.suspended
            and converged
        ):
            status = S.RUNNING
        elif (
            status == S.UPDATING and converged and endpoint.id not in stale and (ready or not alive)
        ):
            status = S.RUNNING if ready else S.SCALED_TO_ZERO
        elif not ready and not alive and status == S.RUNNING:
            status = S.SCALED_TO_ZERO
        changes: dict[str, Any] = {}
        if status != endpoint.status:
            changes["status"] = status
        if ready != endpoint.replicas_ready:
            changes["replicas_ready"] = ready
        if changes:
            changed = (
                Endpoint.objects.filter(pk=endpoint.pk)
                .exclude(status__in=(S.DELETING, S.DELETED, S.FAILED))
                .update(**changes)
            )
            if changed and status == S.RUNNING and endpoint.status != S.RUNNING:
                emit_about(endpoint, EventType.ENDPOINT_RUNNING, status=status)
