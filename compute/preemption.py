"""Preemption: an hourly or monthly order that finds no free GPUs but enough held by
interruptible (spot) holdings takes them back, with notice.

Which spot holdings go (plan): the order goes where placement would put it were those GPUs
free, the node with the most GPUs held by paying (hourly, monthly) rentals (best fit,
compute.placement.choose), and there the fewest holdings that free enough GPUs (and CPU,
memory, disk, pod slots) for it are taken back, the youngest first, a whole gang (a cluster's
ranks, wherever they run) or nothing of it; among nodes equally packed, the one where the
fewest holdings make room, then the one whose holdings taken are youngest. Packing first keeps
the paying schedule what it would be without spot: paying rentals spread over nodes by where
taking back cost least would leave no node free of them for a later whole-node or 8-GPU order,
which cannot take a node back from a paying rental, and spot would then delay it (in
bench.sched_sim_month, where the fewest holdings across nodes first made the on-demand wait
p99 3.50 and 2.81 times what it was without spot, packing first made it 1.006 and 1.002, and
never worse: docs/capacity.md). A node
where the notices already given make room comes before any that takes something back. For a
gang order (a cluster's or a multi-node job's whole nodes: only nodes free of paying rentals
qualify) node after node, the fewest holdings first, a unit taken for one node counting as
freed on the next, or nothing at all when not every node can be freed.
Holdings already under notice count as freed at no cost, so an order that waits for a
notice's deadline takes back nothing more. Hourly and monthly holdings are never taken. A
whole-node order needs a node held by spot holdings alone.

What taking back does (preempt): each chosen holding's `preempt_at` is set to now plus
SPOT_PREEMPT_GRACE_S, and its product is told (preemption_hooks_register), in the same
transaction: it stops billing now, gives the container its notice (SIGTERM and the deadline in
/etc/starverse/preempt), and lets the GPUs go when the container has gone, at the deadline at
the latest (the pod's graceful deletion, which the kubelet enforces). The paying order waits
in line meanwhile, ahead of every spot order (compute.queue), and is placed when they are free.

Runs under the GPU model's exclusive placement lock, which placement takes (the caller's
transaction), so two paying orders never pick the same victims twice: the first one's notices
count as freed for the second."""

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import combinations
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from compute.choices import BillingMode, HoldingKind, HoldingState, OfferingKind
from compute.models import Allocation, Holding, Offering
from compute.placement import Room, capacity, needs, times
from compute.queue import waits_ahead
from fleet.choices import NodeState
from fleet.models import GpuModel, Node
from starverse.core.locks import gpu_model_placement_lock

logger = logging.getLogger(__name__)

# What a product does when its spot holdings are taken back: (holding ids, deadline), in the
# caller's transaction (stop billing, give notice, let the GPUs go by the deadline).
PreemptHook = Callable[[list[str], datetime], None]
_hooks: dict[str, PreemptHook] = {}


def preemption_hooks_register(kind: HoldingKind, hook: PreemptHook) -> None:
    """Called from a product's AppConfig.ready: the compute core imports no product."""
    _hooks[kind] = hook


@dataclass(frozen=True)
class Unit:
    """What is taken back together: one spot holding, or a whole gang of them. `gpus` and
    `room`: what it frees, per node (GPUs, and CPU m, memory MiB, disk MiB, pods)."""

    key: str
    holdings: tuple[str, ...]
    created_at: datetime
    noticed: bool
    gpus: dict[str, int]
    room: dict[str, tuple[int, int, int, int]]

    @property
    def cost(self) -> int:
        """What taking it costs the spot users: its holdings, nothing once under notice."""
        return 0 if self.noticed else len(self.holdings)


def _units(product: str, region: str) -> list[Unit]:
    """The spot holdings placed on nodes of `product` (in `region`, or all), as units."""
    rows = (
        Allocation.objects.filter(
            holding__billing=BillingMode.SPOT,
            holding__state=HoldingState.PLACED,
            node__gpu_product=product,
        )
        .filter(Q(node__region_id=region) if region else Q())
        .values(
            "holding_id",
            "node_id",
            "holding__gang",
            "holding__created_at",
            "holding__preempt_at",
            "holding__kind",
            "holding__offering__cpu_cores",
            "holding__offering__memory_gb",
            "holding__offering__local_disk_gb",
        )
        .annotate(gpus=Count("id"))
    )
    grouped: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        grouped[row["holding__gang"] or row["holding_id"]].append(row)
    units = []
    for key, members in grouped.items():
        gpus: dict[str, int] = defaultdict(int)
        room: dict[str, tuple[int, int, int, int]] = {}
        for row in members:
            gpus[row["node_id"]] += row["gpus"]
            disk = (
                0
                if row["holding__kind"] == HoldingKind.REPLICA
                else row["holding__offering__local_disk_gb"]
            )
            had = room.get(row["node_id"], (0, 0, 0, 0))
            room[row["node_id"]] = (
                had[0] + row["holding__offering__cpu_cores"] * 1000,
                had[1] + row["holding__offering__memory_gb"] * 1024,
                had[2] + disk * 1024,
                had[3] + 1,
            )
        units.append(
            Unit(
                key=key,
                holdings=tuple(sorted({row["holding_id"] for row in members})),
                created_at=max(row["holding__created_at"] for row in members),
                noticed=all(row["holding__preempt_at"] is not None for row in members),
                gpus=dict(gpus),
                room=room,
            )
        )
    return units


def _plus(room: Room, freed: tuple[int, int, int, int]) -> Room:
    return Room(*(None if have is None else have + f for have, f in zip(room, freed, strict=True)))


@dataclass(frozen=True)
class Planned:
    """A plan (plan()): the units to take back now, and the nodes it makes room on, in
    the order chosen (where the order starts once the notices end)."""

    units: list[Unit]
    nodes: tuple[str, ...]


def plan(
    offering: Offering,
    region: str = "",
    *,
    nodes: int = 1,
    reserved: dict[str, int] | None = None,
    noticed: frozenset[str] = frozenset(),
) -> Planned | None:
    """The spot units to take back so that `nodes` holdings of `offering` fit (see the
    module's docstring), one or a gang's whole nodes, all in one region, and the nodes they
    make room on; no units when those free already or under notice make room, None when no
    taking back makes room for all of them (then nothing is taken). GPUs `reserved` for
    paying orders ahead (compute.queue.reserve) are not its to free; the units `noticed`
    (keys) count as under notice. The caller holds the GPU model's placement lock."""
    reserved = reserved or {}
    product = offering.gpu_model.product
    rows, taken, rooms, regions = capacity(product, region)
    units = [
        replace(unit, noticed=True) if unit.key in noticed else unit
        for unit in _units(product, region)
    ]
    # a gang's ranks each take a whole node of the offering's size, all in one region
    # (compute.placement.choose_nodes); a bare-metal holding takes a whole node
    whole = nodes > 1 or offering.kind == OfferingKind.BARE_METAL
    spot: dict[str, int] = defaultdict(int)
    for unit in units:
        for node_id, gpus in unit.gpus.items():
            spot[node_id] += gpus
    groups: dict[str, list[_Node]] = defaultdict(list)
    for node_id, _name, gpu_count in rows:
        if whole and gpu_count != offering.gpu_count:
            continue
        free = gpu_count - len(taken[node_id]) - reserved.get(node_id, 0)
        paying = len(taken[node_id]) - spot[node_id]  # (and lost GPUs: they stay taken too)
        node = _Node(node_id, gpu_count, free, rooms[node_id], paying)
        groups[regions[node_id] if nodes > 1 else ""].append(node)
    best: tuple[_Key, set[str], tuple[str, ...]] | None = None
    for group in groups.values():
        found = _nodes_plan(offering, group, units, count=nodes, whole=whole)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    if best is None:
        return None
    _key, chosen, made_room = best
    to_notice = [unit for unit in units if unit.key in chosen and not unit.noticed]
    return Planned(to_notice, made_room)


class _Node(NamedTuple):
    id: str
    gpu_count: int
    free: int
    room: Room
    paying: int  # GPUs that stay taken: held by paying rentals (or lost)


# How a plan ranks, lower first: (holdings taken back, -GPUs held by paying rentals on the
# nodes made room on, -the oldest taken back's creation time).
_Key = tuple[int, int, float]

# How a node ranks for one of the order's holdings, lower first: (whether it takes anything
# back, -GPUs held by paying rentals on it, holdings taken back, -the oldest's creation time).
_NodeKey = tuple[bool, int, int, float]


# At most this many of a node's spot units are weighed (the youngest): 2^12 subsets a node.
MOST_UNITS = 12


def _nodes_plan(
    offering: Offering, nodes: list[_Node], units: list[Unit], *, count: int, whole: bool
) -> tuple[_Key, set[str], tuple[str, ...]] | None:
    """`count` of these nodes made room on, one after the other, each (_NodeKey) a node where
    nothing more need be taken back if there is one, else the one with the most GPUs held by
    paying rentals (packing), then the one whose room costs fewest holdings (_node_plan), then
    the youngest; a unit taken for one node counts as freed, at no cost, on the next (a spot
    gang spans nodes: taken whole, it frees all of them). Its key (_Key), the keys of the
    units taken and the nodes made room on, or None when fewer than `count` nodes can be made
    room on."""
    chosen: set[str] = set()
    used: list[str] = []
    cost, packed, oldest = 0, 0, float("inf")
    for _ in range(count):
        view = [replace(u, noticed=True) if u.key in chosen else u for u in units]
        best: tuple[_NodeKey, _Node, list[Unit]] | None = None
        for node in nodes:
            if node.id in used:
                continue
            here = [unit for unit in view if node.id in unit.gpus]
            found = _node_plan(offering, node, here, whole=whole)
            if found is None:
                continue
            (step_cost, step_oldest), taken = found
            key = (step_cost > 0, -node.paying, step_cost, step_oldest)
            if best is None or key < best[0]:
                best = (key, node, taken)
        if best is None:
            return None
        (_takes, _packing, step_cost, step_oldest), node, taken = best
        used.append(node.id)
        chosen.update(unit.key for unit in taken)
        cost += step_cost
        packed += node.paying
        if step_cost:
            oldest = min(oldest, -step_oldest)
    return (cost, -packed, -(0.0 if oldest == float("inf") else oldest)), chosen, tuple(used)


def _node_plan(
    offering: Offering, node: _Node, units: list[Unit], *, whole: bool
) -> tuple[tuple[int, float], list[Unit]] | None:
    """On one node: the units under notice (free already) and the set of the others that
    makes room with the fewest holdings, of those the youngest (the set whose oldest member
    is youngest); its key ((holdings, -oldest), lower is better) and the units, or None.
    With `whole`, room is the whole node."""
    noticed = [unit for unit in units if unit.noticed]
    others = sorted(
        (unit for unit in units if not unit.noticed), key=lambda u: u.created_at, reverse=True
    )[:MOST_UNITS]
    free, room = node.free, node.room
    for unit in noticed:
        free, room = free + unit.gpus[node.id], _plus(room, unit.room[node.id])
    best: tuple[tuple[int, float], list[Unit]] | None = None
    for size in range(len(others) + 1):
        if best is not None and size > best[0][0]:
            break  # each unit not under notice costs a holding at least: no larger set wins
        for chosen in combinations(others, size):
            gpus = free + sum(unit.gpus[node.id] for unit in chosen)
            left = room
            for unit in chosen:
                left = _plus(left, unit.room[node.id])
            if not _fits(gpus, left, offering, gpu_count=node.gpu_count, whole=whole):
                continue
            oldest = min((unit.created_at.timestamp() for unit in chosen), default=0.0)
            key = (sum(unit.cost for unit in chosen), -oldest)
            if best is None or key < best[0]:
                best = (key, [*noticed, *chosen])
    return best


def _fits(free: int, room: Room, offering: Offering, *, gpu_count: int, whole: bool) -> bool:
    if whole and free != gpu_count:
        return False
    return free >= offering.gpu_count and times(room, needs(offering)) != 0


class TakenBack(NamedTuple):
    """What preempt_for did: the spot holdings it gave notice, and the nodes its order is made
    room on (a gang's, in the order chosen)."""

    holdings: list[str]
    nodes: tuple[str, ...]


def preempt_for(
    offering: Offering,
    region: str = "",
    *,
    nodes: int = 1,
    now: datetime | None = None,
    reserved: dict[str, int] | None = None,
) -> TakenBack | None:
    """Take back spot holdings so that a paying order of `offering` (kept to `region`; of
    `nodes` whole nodes, a gang) waiting in line fits (plan; outside the GPUs `reserved` for
    orders ahead), under the GPU model's exclusive placement lock, in the caller's
    transaction. Returns the holdings taken back now (none: the notices already given will
    make room) and the nodes the order will start on once they are gone, where the queue keeps
    it its GPUs (compute.queue.reserve); or None when no taking back would make room for all
    of it (nothing is taken)."""
    gpu_model_placement_lock(offering.gpu_model_id)
    found = plan(offering, region, nodes=nodes, reserved=reserved)
    if found is None:
        return None
    holdings = [h for unit in found.units for h in unit.holdings]
    return TakenBack(preempt(holdings, now=now) if holdings else [], found.nodes)


class Headroom(NamedTuple):
    """What spot leaves to paying orders (SPOT_HEADROOM): the GPUs kept from it, by node id,
    and the spot units to take back so that they are free."""

    kept: dict[str, int]
    units: list[Unit]


def headroom(product: str) -> Headroom:
    """The GPUs that SPOT_HEADROOM paying orders of each size (each GPU count the product is
    offered in, the largest first) would be placed on next, in each region, were
    spot gone: each a paying order's plan (packing first, as above), the GPUs of those before
    it kept, so that an hourly or monthly order starts on arrival where it would have started
    without spot, and spot keeps off those GPUs. None while a paying order of the product
    waits in line: the queue keeps GPUs for it (compute.queue.reserve), and an order arriving
    then waits behind it anyway. The caller holds the GPU models' placement locks."""
    if settings.SPOT_HEADROOM <= 0 or waits_ahead(product):
        return Headroom({}, [])
    # one order of each GPU count: a whole-node one first where there is one (a cloud order of
    # a node's every GPU needs the same whole node)
    sizes: dict[int, Offering] = {}
    for offering in Offering.objects.filter(gpu_model__product=product, active=True).order_by(
        "-gpu_count", "kind", "pk"
    ):
        sizes.setdefault(offering.gpu_count, offering)
    regions = sorted(
        set(
            Node.objects.filter(gpu_product=product, state=NodeState.READY).values_list(
                "region_id", flat=True
            )
        )
    )
    kept: dict[str, int] = defaultdict(int)
    chosen: dict[str, Unit] = {}
    for _ in range(settings.SPOT_HEADROOM):
        for region in regions:
            for offering in sizes.values():
                found = plan(offering, region, reserved=kept, noticed=frozenset(chosen))
                if found is None:
                    continue
                for node_id in found.nodes:
                    kept[node_id] += offering.gpu_count
                chosen.update((unit.key, unit) for unit in found.units)
    return Headroom(dict(kept), [unit for unit in chosen.values() if not unit.noticed])


def headroom_clear(product: str, *, now: datetime | None = None) -> Headroom:
    """Give notice to the spot holdings on the GPUs kept for paying orders (headroom), whole
    gangs, under the exclusive placement lock of the product's GPU models, in the caller's
    transaction. Returns the headroom (the holdings given notice: its units')."""
    if settings.SPOT_HEADROOM <= 0:
        return Headroom({}, [])
    for gpu_model_id in (
        GpuModel.objects.filter(product=product).order_by("pk").values_list("pk", flat=True)
    ):
        gpu_model_placement_lock(gpu_model_id)
    found = headroom(product)
    holdings = [holding for unit in found.units for holding in unit.holdings]
    if holdings:
        preempt(holdings, now=now)
        logger.info("spot.headroom product=%s holdings=%d", product, len(holdings))
    return found


def preempt(holding_ids: list[str], *, now: datetime | None = None) -> list[str]:
    """Give these spot holdings notice: their GPUs are taken at now + SPOT_PREEMPT_GRACE_S;
    each product stops them (compute.preemption's hooks). Never an hourly or monthly one."""
    now = now or timezone.now()
    deadline = now + timedelta(seconds=settings.SPOT_PREEMPT_GRACE_S)
    rows = list(
        Holding.objects.filter(
            pk__in=holding_ids, billing=BillingMode.SPOT, preempt_at__isnull=True
        ).values_list("id", "kind")
    )
    by_kind: dict[str, list[str]] = defaultdict(list)
    for pk, kind in rows:
        by_kind[kind].append(pk)
    # products lock their rows before their holdings (compute.metering): the hooks first
    for kind, ids in by_kind.items():
        _hooks[kind](sorted(ids), deadline)
    Holding.objects.filter(pk__in=[pk for pk, _kind in rows]).update(
        preempt_at=deadline,
        preemptions=F("preemptions") + 1,
        preempted_at=timezone.now(),  # the operator overview's preemptions (console.overview)
    )
    logger.info("spot.preempt holdings=%d deadline=%s", len(rows), deadline.isoformat())
    return sorted(pk for pk, _kind in rows)


# The window of the preemption rate Rent and the price list show.
RATE_DAYS = 7


def preemption_rate(gpu_model_id: str, *, days: int = RATE_DAYS) -> float | None:
    """Times taken back per spot rental of a GPU model ordered in the last `days` (None:
    none were ordered)."""
    return preemption_rates(days=days).get(gpu_model_id)


def preemption_rates(*, days: int = RATE_DAYS) -> dict[str, float]:
    """preemption_rate of every GPU model that had spot rentals, in one query: what Rent and
    the public price list show."""
    since = timezone.now() - timedelta(days=days)
    rows = (
        Holding.objects.filter(billing=BillingMode.SPOT, created_at__gte=since)
        .values("offering__gpu_model_id")
        .annotate(made=Count("id"), taken=Sum("preemptions"))
    )
    return {
        row["offering__gpu_model_id"]: (row["taken"] or 0) / row["made"]
        for row in rows
        if row["made"]
    }
