"""A holding's moves (compute.models.Holding): made for a new order, in line, placed on GPUs,
passed over for want of money, released. Each product calls these from its own state machine,
in the transaction that moves its row, so its row and its holding always agree; placement and
the queue read the holdings alone."""

import logging
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from compute.choices import BillingMode, HoldingKind, HoldingState
from compute.metering import meter_close
from compute.models import Allocation, Holding, Offering
from fleet.models import Node

logger = logging.getLogger(__name__)


def holding_new(
    *,
    holding_id: str,
    kind: HoldingKind,
    tenant_id: str,
    created_by_id: str,
    offering: Offering,
    billing: str = BillingMode.HOURLY,
    region_id: str | None = None,
    gang: str = "",
    parent: str = "",
    placement: tuple[Node, list[int]] | None = None,
    queued_at: datetime | None = None,
    waiting: bool = True,
) -> tuple[Holding, list[Allocation]]:
    """The (unsaved) holding of a new order and, when placement found GPUs for it at once,
    its allocations: the caller writes them with its own row in one round trip
    (starverse.core.db.insert_together). Not placed, it waits in line from `queued_at` (now
    by default), or, not `waiting`, holds nothing (a cluster's rank added while it is
    stopped). `parent`: what it is a part of (a rank's cluster, a replica's endpoint)."""
    holding = Holding(
        id=holding_id,
        kind=kind,
        tenant_id=tenant_id,
        created_by_id=created_by_id,
        offering=offering,
        billing=billing,
        region_id=region_id,
        gang=gang,
        parent=parent,
    )
    if placement is None and not waiting:
        holding.state = HoldingState.RELEASED
        return holding, []
    if placement is None:
        holding.state, holding.queued_at = HoldingState.QUEUED, queued_at or timezone.now()
        return holding, []
    node, indices = placement
    holding.state, holding.region_id = HoldingState.PLACED, node.region_id
    return holding, allocations_new(holding_id, node, indices)


def allocations_new(holding_id: str, node: Node, indices: list[int]) -> list[Allocation]:
    """The allocation rows (unsaved) that give the holding these GPUs of `node`."""
    return [Allocation(node=node, gpu_index=i, holding_id=holding_id) for i in indices]


def _holding(holding_id: str) -> QuerySet[Holding]:
    return Holding.objects.filter(pk=holding_id)


def holding_place(holding_id: str, node: Node, indices: list[int]) -> None:
    """A holding gets these GPUs of `node` (in the caller's transaction, under the GPU model's
    placement lock): it leaves the queue and runs in the node's region."""
    Allocation.objects.bulk_create(allocations_new(holding_id, node, indices))
    _holding(holding_id).update(
        state=HoldingState.PLACED,
        region_id=node.region_id,
        queued_at=None,
        unfunded_since=None,
        gpus_attached=True,
        cpu_node=None,
        wait_until=None,
        preempt_at=None,
    )


def holding_place_cpu_only(holding_id: str, node: Node) -> None:
    """No-GPU mode: the holding runs on `node` without GPUs (compute.placement.choose_cpu_only
    found the CPU and memory, in the caller's transaction under its locks). It has no
    allocations; placement counts its pod against the node by `cpu_node`."""
    _holding(holding_id).update(
        state=HoldingState.PLACED,
        region_id=node.region_id,
        queued_at=None,
        unfunded_since=None,
        gpus_attached=False,
        cpu_node=node,
    )


def holding_gpus_attached_set(holding_id: str, attached: bool) -> None:
    """A monthly rental starts on its reserved node with its GPUs or without them (no-GPU
    mode): its allocations stay either way."""
    _holding(holding_id).update(gpus_attached=attached)


def holding_queue(holding_id: str, *, at: datetime | None = None) -> None:
    """The holding waits in line for GPUs from `at` (now by default; a rank that moves or an
    instance that recovers keeps its original place by passing an earlier time)."""
    _holding(holding_id).update(
        state=HoldingState.QUEUED,
        queued_at=at or timezone.now(),
        unfunded_since=None,
        gpus_attached=True,
    )


def holding_release(holding_id: str) -> None:
    """The holding gives its GPUs back, if it held any, and waits for none. Holding nothing,
    it serves nothing: a metering session its product left open is closed here, its closed
    minutes posted, so no path can leave a holding billed after it let its GPUs go."""
    if meter_close(holding_id, now=timezone.now(), started_minute=False):
        logger.warning("meter.closed_at_release holding=%s", holding_id)
    Allocation.objects.filter(holding_id=holding_id).delete()
    _holding(holding_id).update(
        state=HoldingState.RELEASED,
        queued_at=None,
        unfunded_since=None,
        cpu_node=None,
        preempt_at=None,
    )


def holdings_unfunded(holding_ids: list[str], *, since: datetime) -> None:
    """Their turn came and the balance did not cover them: the queue passes them over."""
    Holding.objects.filter(pk__in=holding_ids, state=HoldingState.QUEUED).update(
        unfunded_since=since
    )


def holdings_funded(holding_ids: list[str]) -> None:
    """The balance covers them again: they wait in line as before."""
    Holding.objects.filter(pk__in=holding_ids).update(unfunded_since=None)


def holds_gpus(holding_id: str) -> bool:
    """Whether the holding has GPUs allocated now (a monthly rental keeps its node while it is
    stopped)."""
    return Allocation.objects.filter(holding_id=holding_id).exists()


def holding_gang_set(holding_id: str, gang: str) -> None:
    """The holding leaves its gang (a rank scaled away) or joins one."""
    _holding(holding_id).update(gang=gang)


def holding_of(holding_id: str) -> Holding:
    return Holding.objects.get(pk=holding_id)


def unfunded(*, tenant_id: str | None = None) -> list[str]:
    """The queued holdings passed over for want of money (of one tenant, or of all), oldest
    first: the queue looks at them again when money comes in and every minute."""
    rows = Holding.objects.filter(state=HoldingState.QUEUED, unfunded_since__isnull=False)
    if tenant_id is not None:
        rows = rows.filter(tenant_id=tenant_id)
    return list(rows.order_by("queued_at", "id").values_list("id", flat=True))


def holding_billing_set(holding_id: str, billing: str) -> None:
    """The holding is billed another way from now (a monthly rental that ended runs on by the
    hour)."""
    _holding(holding_id).update(billing=billing)


def holding_wait_until(holding_id: str, until: datetime) -> None:
    """A queued spot order gives up waiting at `until` (its max wait)."""
    _holding(holding_id).update(wait_until=until)


def waited_out(now: datetime) -> list[str]:
    """The queued holdings whose max wait has passed (oldest first): their products fail them."""
    rows = Holding.objects.filter(state=HoldingState.QUEUED, wait_until__lte=now)
    return list(rows.order_by("queued_at", "id").values_list("id", flat=True))
