"""Services for the fleet: node registration and tokens, state transitions (operator actions
and health rules), report ingestion, and telemetry retention."""

import functools
import hmac
import logging
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Avg, Count, Max
from django.db.models.functions import TruncMinute
from django.utils import timezone

from fleet.choices import (
    CRITICAL_XIDS,
    NODE_TRANSITIONS,
    HealthRuleKind,
    NodeEventKind,
    NodeState,
)
from fleet.models import (
    DEFAULT_REGION,
    Gpu,
    GpuModel,
    GpuRollup,
    GpuSample,
    HealthRule,
    Node,
    NodeEvent,
    NodeImage,
    Region,
)
from fleet.selectors import region_scope
from fleet.signals import node_out_of_service
from fleet.telemetry import STORED_METRICS, Report
from starverse.accounts.models import User
from starverse.accounts.tokens import (
    NODE_TOKEN_PREFIX,
    token_display_prefix,
    token_generate,
    token_hash,
    token_is_well_formed,
)
from starverse.core import kube
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, InvalidInput

logger = logging.getLogger(__name__)
RAW_RETENTION = timedelta(hours=24)
ROLLUP_RETENTION = timedelta(days=30)


# --- regions ------------------------------------------------------------------------------


def region_register(
    *, name: str, display_name: str, kubeconfig: str = "", display_name_zh_hans: str = ""
) -> Region:
    """Register a region (a cluster), or update one: its display names (English, and Chinese:
    blank shows the English) and kubeconfig path. Its nodes join at the next sync
    (fleet.tasks.sync_nodes_from_cluster)."""
    names = {"display_name": display_name or name, "display_name_zh_hans": display_name_zh_hans}
    region, created = Region.objects.update_or_create(
        name=name, defaults={**names, "kubeconfig": kubeconfig}
    )
    logger.info("region.registered region=%s created=%s", name, created)
    return region


# --- registration -------------------------------------------------------------------------


def node_token_revoke(*, node: Node) -> None:
    """Reset the node's agent registration: its token stops working, and its agent registers
    again with the bootstrap token (and keeps the new token on its node). The way to rotate a
    node's credential when agents join by bootstrap."""
    Node.objects.filter(pk=node.pk).update(token_hash=None, token_prefix="")
    NodeEvent.objects.create(
        node=node,
        kind=NodeEventKind.TOKEN_RESET,
        message="Agent registration reset: the agent registers again with the bootstrap token.",
    )
    logger.info("node.token_revoked node=%s", node.name)


def node_token_issue(*, node: Node) -> str:
    """A new agent token for the node (the old one stops working); shown once."""
    plaintext = token_generate(NODE_TOKEN_PREFIX)
    Node.objects.filter(pk=node.pk).update(
        token_hash=token_hash(plaintext), token_prefix=token_display_prefix(plaintext)
    )
    logger.info("node.token_issued node=%s", node.name)
    return plaintext


@functools.cache
def _node_by_token_sql() -> str:
    columns = ", ".join(f'"{field.column}"' for field in Node._meta.concrete_fields)
    return f'SELECT {columns} FROM "{Node._meta.db_table}" WHERE name = %s AND token_hash = %s'  # noqa: S608


def node_for_token(*, name: str, token: str) -> Node | None:
    """The node if the token is its token; None for a malformed, wrong or unknown one. Every
    agent report starts here (68 a second for 1,024 nodes): a plain statement, since building
    it through the ORM cost several times what running it does (name is unique: one row)."""
    if not token_is_well_formed(token, NODE_TOKEN_PREFIX):
        return None
    found = list(Node.objects.raw(_node_by_token_sql(), [name, token_hash(token)]))
    return found[0] if found else None


def node_register(
    *, name: str, bootstrap_token: str, spec: dict[str, Any], region: str = ""
) -> tuple[Node, str]:
    """An agent joining with the fleet's bootstrap token gets its node (created if new, in the
    region its agent names, or one the cluster sync found that has no agent yet) and a node
    token of its own. A node that already has a token is refused: the bootstrap token must not
    let anyone lock a node's real agent out; a new token for it is an admin action. A node the
    sync found in another region than the agent names is refused too (a misconfigured agent)."""
    expected = settings.NODE_BOOTSTRAP_TOKEN
    if not expected or not hmac.compare_digest(bootstrap_token.encode(), expected.encode()):
        raise InvalidInput("Unknown bootstrap token.", code="bad_bootstrap_token")
    region = region or DEFAULT_REGION
    if not Region.objects.filter(pk=region).exists():
        raise InvalidInput(f"Unknown region {region!r}.", code="unknown_region")
    plaintext = token_generate(NODE_TOKEN_PREFIX)
    issued = {"token_hash": token_hash(plaintext), "token_prefix": token_display_prefix(plaintext)}
    with transaction.atomic():
        node, created = Node.objects.get_or_create(
            name=name, defaults={**spec, **issued, "region_id": region}
        )
        if not created and node.region_id != region:
            raise Conflict(
                f"Node {name!r} belongs to region {node.region_id!r}, not {region!r}: check the "
                "agent's --region.",
                code="wrong_region",
            )
        # The condition on token_hash makes two racing first registrations give one token.
        if not created and not Node.objects.filter(pk=node.pk, token_hash=None).update(**issued):
            raise Conflict(
                f"Node {name!r} is already registered. A new agent token for it is an admin "
                'action: the node\'s "New agent token" in the admin.',
                code="node_exists",
            )
        if created:
            NodeEvent.objects.create(
                node=node, kind=NodeEventKind.REGISTERED, message="Registered by its node agent."
            )
    logger.info("node.registered node=%s created=%s", node.name, created)
    return node, plaintext


# --- state --------------------------------------------------------------------------------


def node_transition(
    *,
    node: Node,
    to: str,
    reason: str,
    kind: str = NodeEventKind.STATE,
    actor: User | None = None,
    code: int | None = None,
    gpu: Gpu | None = None,
) -> bool:
    """Move a node to another state, once, with an event saying why. False if it already was."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state == to:
            return False
        if to not in NODE_TRANSITIONS[NodeState(locked.state)]:
            raise Conflict(f"A {locked.state} node cannot become {to}.")
        who = f" (by {actor.email})" if actor and actor.email else ""
        locked.state, locked.state_reason, locked.state_changed_at = to, reason, timezone.now()
        locked.save(update_fields=["state", "state_reason", "state_changed_at"])
        NodeEvent.objects.create(
            node=locked,
            gpu=gpu,
            kind=kind,
            code=code,
            message=f"{NodeState(to).label}: {reason}{who}",
        )
    node.state, node.state_reason = to, reason
    logger.warning("node.state node=%s state=%s reason=%s", node.name, to, reason)
    if node.in_cluster:
        # The worker mirrors it: a web request (an admin action, an agent's report) never
        # talks to the cluster.
        enqueue_on_commit("fleet.tasks.mirror_node_schedulable", node.pk)
    if to != NodeState.READY:
        # The instances app, above this one, tells the instances on the node (fails,
        # recovers or warns them).
        node_out_of_service.send(sender=Node, node_id=node.pk, state=to, reason=reason)
    return True


def node_schedulable_mirror(*, node_id: str) -> bool | None:
    """Put the cluster's Node.spec.unschedulable in step with the node's state as it is now
    (a ready node schedulable, any other not). Returns the value set, None for a node that is
    gone or not in the cluster. Retryable cluster errors propagate to the retrying task."""
    node = Node.objects.filter(pk=node_id).first()
    if node is None or not node.in_cluster:
        return None
    unschedulable = node.state != NodeState.READY
    with region_scope(node.region_id):
        kube.node_set_unschedulable(node.name, unschedulable)
    return unschedulable


def node_cordon(*, node: Node, reason: str, actor: User | None) -> bool:
    if not reason.strip():
        raise InvalidInput("A reason is required.")
    return node_transition(node=node, to=NodeState.CORDONED, reason=reason.strip(), actor=actor)


def node_drain(*, node: Node, reason: str, actor: User | None) -> bool:
    if not reason.strip():
        raise InvalidInput("A reason is required.")
    return node_transition(node=node, to=NodeState.DRAINING, reason=reason.strip(), actor=actor)


def node_uncordon(*, node: Node, actor: User | None) -> bool:
    return node_transition(node=node, to=NodeState.READY, reason="returned to service", actor=actor)


def node_review_request(*, node: Node, reason: str) -> bool:
    """Put a node up for an operator's review: something the platform cannot vouch for (a
    cluster's pre-flight check, run in a tenant's container) says it is bad, and none of the
    platform's own signals agrees. It stays ready and takes rentals; only an operator takes it
    out of service (node_review_confirm) or clears the review (node_review_clear). Each request
    is an event; the review keeps the first one's reason and time. False if it was up already."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        first = locked.review_since is None
        if first:
            locked.review_reason, locked.review_since = reason, timezone.now()
            locked.save(update_fields=["review_reason", "review_since"])
        NodeEvent.objects.create(
            node=locked, kind=NodeEventKind.REVIEW, message=f"Up for review: {reason}"
        )
    node.review_reason, node.review_since = locked.review_reason, locked.review_since
    logger.warning("node.review node=%s reason=%s", node.name, reason)
    return first


def node_review_confirm(*, node: Node, actor: User | None) -> bool:
    """An operator's review found the node at fault: it is cordoned with the review's reason
    (the instances on it are told) and is no longer up for review. False if it was not up."""
    with transaction.atomic():
        reason = _review_end(node, actor=actor, verdict="confirmed")
        if reason is None:
            return False
        node_cordon(node=node, reason=f"review confirmed: {reason}", actor=actor)
    return True


def node_review_clear(*, node: Node, actor: User | None) -> bool:
    """An operator's review found nothing wrong: the node is no longer up for review (it never
    left service). False if it was not up."""
    with transaction.atomic():
        return _review_end(node, actor=actor, verdict="cleared") is not None


def _review_end(node: Node, *, actor: User | None, verdict: str) -> str | None:
    """End the node's review with an event naming the operator; its reason, or None if it was
    not up for review."""
    locked = Node.objects.select_for_update().get(pk=node.pk)
    if locked.review_since is None:
        return None
    reason = locked.review_reason
    locked.review_reason, locked.review_since = "", None
    locked.save(update_fields=["review_reason", "review_since"])
    who = f" (by {actor.email})" if actor and actor.email else ""
    NodeEvent.objects.create(
        node=locked, kind=NodeEventKind.REVIEW, message=f"Review {verdict}: {reason}{who}"
    )
    node.review_reason, node.review_since = "", None
    logger.info("node.review_%s node=%s", verdict, node.name)
    return reason


# --- reports ------------------------------------------------------------------------------


def _rules(kind: HealthRuleKind) -> list[HealthRule]:
    return [rule for rule in HealthRule.objects.filter(enabled=True) if rule.kind == kind]


def _inventory_sync(node: Node, report: Report, now: datetime) -> dict[str, Gpu]:
    gpus = {gpu.uuid: gpu for gpu in Gpu.objects.filter(node=node)}
    for item in report.inventory:
        gpu = gpus.get(item["uuid"])
        fields = {key: value for key, value in item.items() if key != "uuid"}  # the Gpu columns
        if gpu is None:
            Gpu.objects.filter(node=node, index=item["index"]).exclude(uuid=item["uuid"]).delete()
            gpus[item["uuid"]] = Gpu.objects.create(
                node=node, uuid=item["uuid"], last_seen_at=now, **fields
            )
        elif any(getattr(gpu, k) != v for k, v in fields.items()) or gpu.lost_at:
            for k, v in fields.items():
                setattr(gpu, k, v)
            gpu.lost_at, gpu.last_seen_at = None, now
            gpu.save()
    return gpus


# Per process: node id → (the inventory it last reported, uuid → gpu id). Reports repeat
# their inventory every 15 s; only a change needs the database.
_Inventory = tuple[tuple[tuple[str, object], ...], ...]
_GPU_MAP: dict[str, tuple[_Inventory, dict[str, int]]] = {}
_SAMPLE_COLUMNS = ("gpu_id", "at", *STORED_METRICS)


def _gpu_ids(node: Node, report: Report, now: datetime) -> dict[str, int]:
    ids = _gpu_ids_cached(node, report)
    if ids is not None:
        return ids
    if report.inventory:
        # Two workers may sync a node's new inventory at once (its first report and the agent's
        # retry after a timeout): under the node's row lock, which the heartbeat's UPDATE takes
        # anyway, the second waits and reads the GPUs the first created instead of inserting
        # them again (a unique-uuid error, a 500 the agent counts as a lost report).
        Node.objects.select_for_update().filter(pk=node.pk).values_list("pk").get()
        gpus = _inventory_sync(node, report, now)
    else:
        gpus = {gpu.uuid: gpu for gpu in Gpu.objects.filter(node=node)}
    ids = {uuid: gpu.pk for uuid, gpu in gpus.items()}
    _GPU_MAP[node.pk] = (_signature(report), ids)
    return ids


def _gpu_ids_cached(node: Node, report: Report) -> dict[str, int] | None:
    """uuid → gpu id from this process's cache, or None when the report's inventory is new."""
    cached = _GPU_MAP.get(node.pk)
    if cached is not None and (not report.inventory or cached[0] == _signature(report)):
        return cached[1]
    return None


def _signature(report: Report) -> _Inventory:
    return tuple(tuple(sorted(item.items())) for item in report.inventory)


# Rows and updates are SQL parameters: any value the database driver adapts.
def _store(node: Node, rows: list[tuple[Any, ...]], updates: dict[str, Any]) -> None:
    """The samples in one multi-row INSERT and the node's heartbeat, in one statement (the
    INSERT a WITH part of the UPDATE): this is the fleet's hottest write, so it skips the ORM,
    and as one statement it is atomic without a transaction around it: one round trip where
    BEGIN, INSERT, UPDATE and COMMIT took four."""
    table = GpuSample._meta.db_table
    params: list[Any] = []
    insert = ""
    if rows:
        columns = ", ".join(_SAMPLE_COLUMNS)
        values = ", ".join(["(" + ", ".join(["%s"] * len(_SAMPLE_COLUMNS)) + ")"] * len(rows))
        insert = f"WITH samples AS (INSERT INTO {table} ({columns}) VALUES {values}) "  # noqa: S608
        params = [value for row in rows for value in row]
    assignments = ", ".join(f"{name} = %s" for name in updates)
    with connection.cursor() as cursor:
        cursor.execute(
            f"{insert}UPDATE {Node._meta.db_table} SET {assignments} WHERE id = %s",  # noqa: S608
            [*params, *updates.values(), node.pk],
        )


def report_ingest(*, node: Node, report: Report) -> int:
    """Store a report's samples, inventory and events, then apply the health rules it can
    trigger. Returns the number of GPU samples stored. Metrics refused as out of range are
    stored as null; the heartbeat is recorded all the same."""
    now = timezone.now()
    if report.refused:
        first = report.refused[0]
        logger.warning(
            "node.report_refused node=%s count=%d gpu=%s field=%s reason=%s",
            node.name,
            len(report.refused),
            first["gpu"],
            first["field"],
            first["reason"],
        )
    updates = {
        "last_report_at": now,
        "agent_version": report.agent_version,
        "driver_version": report.driver["driver_version"],
        "cuda_version": report.driver["cuda_version"],
    }
    # A known inventory (nearly every report) needs one statement, atomic by itself; a new one
    # is synced first, in the same transaction as the samples. Inside a caller's transaction a
    # savepoint keeps a failed report from breaking it, as before.
    ids = _gpu_ids_cached(node, report)
    alone = ids is not None and not connection.in_atomic_block
    try:
        with nullcontext() if alone else transaction.atomic():
            ids = ids if ids is not None else _gpu_ids(node, report, now)
            rows = [
                (ids[reading.uuid], at, *(reading.values[column] for column in STORED_METRICS))
                for at, readings in report.samples
                for reading in readings
                if reading.uuid in ids
            ]
            _store(node, rows, updates)
    except IntegrityError:
        _GPU_MAP.pop(node.pk, None)  # a GPU row went away under the cache: next report rebuilds
        raise
    for key, value in updates.items():
        setattr(node, key, value)
    if report.events or report.lost_gpus or _anomalous(report):
        gpus = {gpu.uuid: gpu for gpu in Gpu.objects.filter(node=node)}
        _apply_report_rules(node, report, gpus)
    if node.state == NodeState.DOWN and node.state_reason.startswith("heartbeat"):
        node_transition(
            node=node, to=NodeState.READY, reason="reports again", kind=NodeEventKind.HEARTBEAT
        )
    return len(rows)


def _anomalous(report: Report) -> bool:
    return any(
        (reading.values.get("ecc_dbe") or 0) > 0 or reading.uncorrectable > 0
        for _at, readings in report.samples[-1:]
        for reading in readings
    )


def _apply_report_rules(node: Node, report: Report, gpus: dict[str, Gpu]) -> None:
    for event in report.events:
        if event["type"] != "xid" or event["xid"] is None:
            continue
        gpu = gpus.get(event["uuid"])
        NodeEvent.objects.create(
            node=node,
            gpu=gpu,
            kind=NodeEventKind.XID,
            code=event["xid"],
            at=event["at"],
            message=event["message"] or f"XID {event['xid']}",
        )
        for rule in _rules(HealthRuleKind.XID):
            if event["xid"] in rule.params.get("xids", []):
                node_transition(
                    node=node,
                    to=rule.action,
                    kind=NodeEventKind.XID,
                    gpu=gpu,
                    code=event["xid"],
                    reason=f"critical XID {event['xid']} on GPU {event['gpu']} (rule {rule.name})",
                )
    for lost in report.lost_gpus:
        gpu = gpus.get(lost["uuid"]) or next(
            (g for g in gpus.values() if g.index == lost["index"]), None
        )
        if gpu is not None and gpu.lost_at is None:
            Gpu.objects.filter(pk=gpu.pk).update(lost_at=timezone.now())
        for rule in _rules(HealthRuleKind.GPU_LOST):
            node_transition(
                node=node,
                to=rule.action,
                kind=NodeEventKind.GPU_LOST,
                gpu=gpu,
                reason=f"GPU {lost['index']} lost ({lost['error'] or 'not visible'}; "
                f"rule {rule.name})",
            )
    for rule in _rules(HealthRuleKind.ECC_UNCORRECTABLE):
        threshold = int(rule.params.get("min_count", 1))
        for _at, readings in report.samples[-1:]:
            for reading in readings:
                dbe = int(reading.values.get("ecc_dbe") or 0)
                if max(dbe, reading.uncorrectable) >= threshold:
                    node_transition(
                        node=node,
                        to=rule.action,
                        kind=NodeEventKind.ECC,
                        gpu=gpus.get(reading.uuid),
                        reason=f"uncorrectable ECC errors on GPU {reading.index} "
                        f"(rule {rule.name})",
                    )


def heartbeats_check() -> list[str]:
    """Nodes whose agent has not reported within the heartbeat rule's timeout go down."""
    downed = []
    for rule in _rules(HealthRuleKind.HEARTBEAT):
        cutoff = timezone.now() - timedelta(seconds=int(rule.params.get("timeout_s", 60)))
        stale = Node.objects.filter(last_report_at__lt=cutoff).exclude(state=NodeState.DOWN)
        for node in stale:
            assert node.last_report_at is not None  # last_report_at__lt leaves out NULL
            seconds = int((timezone.now() - node.last_report_at).total_seconds())
            if node_transition(
                node=node,
                to=rule.action,
                kind=NodeEventKind.HEARTBEAT,
                reason=f"heartbeat lost: no report for {seconds} s (rule {rule.name})",
            ):
                downed.append(node.name)
    return downed


# --- retention ----------------------------------------------------------------------------


def telemetry_rollup(*, since: datetime | None = None) -> int:
    """Aggregate raw samples into one-minute rollups (idempotent: upserts by gpu+minute)."""
    since = since or timezone.now() - timedelta(minutes=10)
    rows = (
        GpuSample.objects.filter(at__gte=since)
        .annotate(minute=TruncMinute("at"))
        .values("gpu_id", "minute")
        .annotate(
            samples=Count("id"),
            util_avg=Avg("util"),
            mem_used_mb_avg=Avg("mem_used_mb"),
            temp_c_max=Max("temp_c"),
            power_w_avg=Avg("power_w"),
        )
    )
    rollups = [GpuRollup(**row) for row in rows]
    GpuRollup.objects.bulk_create(
        rollups,
        update_conflicts=True,
        unique_fields=["gpu", "minute"],
        update_fields=["samples", "util_avg", "mem_used_mb_avg", "temp_c_max", "power_w_avg"],
    )
    return len(rollups)


def telemetry_prune() -> tuple[int, int]:
    """Drop raw samples older than 24 hours and rollups older than 30 days."""
    now = timezone.now()
    raw, _ = GpuSample.objects.filter(at__lt=now - RAW_RETENTION).delete()
    rolled, _ = GpuRollup.objects.filter(minute__lt=now - ROLLUP_RETENTION).delete()
    return raw, rolled


# --- the cluster's view -------------------------------------------------------------------

_INTERCONNECT_BANDWIDTH = {"nvlink": 900}


def _product(label: str) -> str:
    """GPU feature discovery writes the NVML product name with spaces as dashes."""
    for product in GpuModel.objects.values_list("product", flat=True):
        if product.replace(" ", "-") == label:
            return product
    return label.replace("-", " ")


TOPOLOGY_LABELS = {
    "rack": "topology.starverse.io/rack",
    "switch": "topology.starverse.io/switch",
    "fabric": "topology.starverse.io/fabric",
}


def _node_spec(item: kube.ClusterNode) -> dict[str, object]:
    """The fleet's columns of a node as the cluster reports it (its GPU feature discovery
    labels, capacity and allocatable), to update the node's row with."""
    labels = item.labels
    interconnect = labels.get("starverse.io/interconnect", "pcie")
    return {
        # a CPU-only node (no GPUs: no-GPU mode's pods run there) has no product
        "gpu_product": (
            _product(labels.get("nvidia.com/gpu.product", "unknown")) if item.gpu_count else ""
        ),
        "gpu_count": item.gpu_count,
        "gpu_memory_mb": int(labels.get("nvidia.com/gpu.memory", "0") or 0),
        "interconnect": interconnect if interconnect in ("nvlink", "pcie") else "pcie",
        "nvlink_bandwidth_gbps": _INTERCONNECT_BANDWIDTH.get(interconnect),
        "cpu_cores": item.cpu_cores,
        "memory_gb": item.memory_gb,
        "allocatable_cpu_m": item.allocatable_cpu_m,
        "allocatable_memory_mib": item.allocatable_memory_mib,
        "allocatable_ephemeral_mib": item.allocatable_ephemeral_mib,
        "allocatable_pods": item.allocatable_pods,
        "labels": labels,
        # Topology for cluster placement; a label the cluster does not set stays as it was
        # (an operator may have entered it in the admin).
        **{
            field: labels[TOPOLOGY_LABELS[field]]
            for field in TOPOLOGY_LABELS
            if TOPOLOGY_LABELS[field] in labels
        },
        "in_cluster": True,
    }


def nodes_sync_from_cluster(*, region: str = DEFAULT_REGION) -> int:
    """Mirror a region's cluster's Node objects into the fleet (called inside that region's
    kube.cluster context; the default region is KUBECONFIG's): new nodes appear in the
    region, capacity, labels and the images each holds (Node.status.images) follow the
    cluster. A node without GPUs is mirrored too, with no GPU product and 0 GPUs: instances in
    no-GPU mode run there (compute.placement.choose_cpu_only); GPU placement never matches it
    and it has no node agent (no NVML), so no heartbeat rule ever reads it. Nodes gone from
    the cluster are marked, never deleted. A node name another region already holds is
    skipped and logged: names are unique across the regions (the agents report by name)."""
    seen = []
    synced: list[str] = []
    held: dict[tuple[str, str], int] = {}
    for item in kube.nodes_list():
        spec = _node_spec(item)
        elsewhere = Node.objects.filter(name=item.name).exclude(region_id=region).first()
        if elsewhere is not None:
            logger.error(
                "fleet.sync_name_clash node=%s region=%s held_by=%s",
                item.name,
                region,
                elsewhere.region_id,
            )
            continue
        node, created = Node.objects.update_or_create(
            name=item.name, defaults={**spec, "region_id": region}
        )
        if created:
            NodeEvent.objects.create(
                node=node, kind=NodeEventKind.REGISTERED, message="Discovered in the cluster."
            )
        seen.append(item.name)
        held.update({(node.pk, name): size for name, size in item.images})
        synced.append(node.pk)
    Node.objects.filter(region_id=region, in_cluster=True).exclude(name__in=seen).update(
        in_cluster=False
    )
    _node_images_sync(synced, held)
    return len(seen)


def _node_images_sync(node_ids: list[str], held: dict[tuple[str, str], int]) -> None:
    """The images the synced nodes hold become exactly `held` ((node, name) → bytes): what
    they dropped is deleted and what they pulled added, in three statements whatever the
    fleet's size."""
    rows = NodeImage.objects.filter(node_id__in=node_ids)
    have = {(node_id, name): pk for pk, node_id, name in rows.values_list("pk", "node_id", "name")}
    gone = [pk for key, pk in have.items() if key not in held]
    if gone:
        NodeImage.objects.filter(pk__in=gone).delete()
    NodeImage.objects.bulk_create(
        [
            NodeImage(node_id=node_id, name=name, size_bytes=size)
            for (node_id, name), size in held.items()
            if (node_id, name) not in have
        ],
        ignore_conflicts=True,
    )


# The rules a new installation starts with (migration instances 0002 seeded the same ones).
DEFAULT_HEALTH_RULES = [
    ("heartbeat-60s", HealthRuleKind.HEARTBEAT, {"timeout_s": 60}, NodeState.DOWN),
    (
        "critical-xid",
        HealthRuleKind.XID,
        {"xids": list(CRITICAL_XIDS)},
        NodeState.CORDONED,
    ),
    ("uncorrectable-ecc", HealthRuleKind.ECC_UNCORRECTABLE, {"min_count": 1}, NodeState.CORDONED),
    ("gpu-lost", HealthRuleKind.GPU_LOST, {}, NodeState.CORDONED),
]


def health_rules_ensure_defaults() -> None:
    """Put back any default health rule that is missing (operators' edits are kept)."""
    for name, kind, params, action in DEFAULT_HEALTH_RULES:
        HealthRule.objects.get_or_create(
            name=name, defaults={"kind": kind, "params": params, "action": action}
        )
