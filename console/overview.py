"""The operator overview's numbers, read from the database by a fixed handful of aggregate
queries whatever the size of the fleet or the number of tenants: GPU utilisation per model per
hour and per node per hour (last 7 days), revenue per day (last 30 days), the top tenants by
spend, and the queue.

Allocations are deleted when an instance gives its GPUs back, so the history of who held GPUs
comes from the instances' events: an instance holds its offering's GPUs from an event in a
GPU-holding state (instances.choices.HOLDS_GPUS) until its next event. Those intervals are read
in one query (each with the next event's time from a window function) and cut into hours
here; the node of an interval is the one its placement event names ("Placed on %(node)s."),
carried forward, else the instance's node now. A stopped monthly rental keeps its node
reserved until its period ends; its events do not say when, so the history counts those GPUs
free while it is stopped (the fleet page's capacity, from the allocations, counts them held)."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models import Count, F, Min, OuterRef, Q, Subquery, Sum, Window
from django.db.models.functions import Lead, TruncDay
from django.utils import timezone

from billing.choices import TransactionKind
from billing.models import LedgerTransaction
from compute.choices import HoldingState
from compute.models import Allocation, Holding
from compute.preemption import headroom
from fleet.choices import NodeState
from fleet.models import GpuModel, Node
from instances.choices import HOLDS_GPUS, InstanceStatus
from instances.models import Instance, InstanceEvent

HOURS = 7 * 24
DAYS = 30
TOP_TENANTS = 10
MODEL = "offering__gpu_model__product"


@dataclass
class ModelUse:
    """One GPU model: its GPUs in the fleet now and the share of them allocated in each hour."""

    product: str
    name: str
    total: int
    percent: list[float] = field(default_factory=list)

    @property
    def average(self) -> float:
        return sum(self.percent) / len(self.percent) if self.percent else 0.0

    @property
    def peak(self) -> float:
        return max(self.percent, default=0.0)


@dataclass
class NodeRow:
    """One node of the heat map: GPUs allocated on average in each hour."""

    name: str
    product: str
    gpu_count: int
    gpus: list[float]


@dataclass
class Overview:
    now: datetime
    hours: list[datetime]
    models: list[ModelUse]
    nodes: list[NodeRow]
    days: list[dict[str, Any]]
    tenants: list[dict[str, Any]]
    queue: list[dict[str, Any]]

    @property
    def revenue_fen(self) -> int:
        return sum(day["revenue_fen"] for day in self.days)


def _intervals(since: datetime, now: datetime) -> list[tuple[Any, ...]]:
    """(instance, status, start, end or None, GPUs, product, node now, event params) of every
    event before `now` whose stretch (to the instance's next event) overlaps [since, now), in
    instance and time order. The next event comes from one window (LEAD) over the events read;
    only instances with an event in the window or holding GPUs now are read, so old history
    costs nothing."""
    active = Instance.objects.filter(Q(status__in=HOLDS_GPUS) | Q(events__at__gte=since))
    following = Window(Lead("at"), partition_by=[F("instance_id")], order_by=[F("at"), F("id")])
    rows = (
        InstanceEvent.objects.filter(instance__in=active.values("id"), at__lt=now)
        .annotate(until=following)
        .filter(Q(until__isnull=True) | Q(until__gt=since))
        .order_by("instance_id", "at", "id")
    )
    return list(
        rows.values_list(
            "instance_id",
            "status",
            "at",
            "until",
            "instance__offering__gpu_count",
            "instance__" + MODEL,
            "instance__node__name",
            "params",
            "instance__region_id",
        )
    )


class Stretch(NamedTuple):
    """A stretch of time an instance held GPUs: [start, end) within the window read."""

    instance: str
    start: datetime
    end: datetime
    gpus: int
    product: str
    node: str | None
    region: str


def held_stretches(since: datetime, now: datetime) -> list[Stretch]:
    """Every stretch in [since, now) in which an instance held GPUs, from its events
    (_intervals): in a GPU-holding state, on the node its last placement event named. A start
    in no-GPU mode (its event says `gpus`: 0, instances.states.instance_mark_placed_cpu_only)
    holds none until its next placement; a monthly rental's no-GPU start keeps its GPUs
    reserved, and they count."""
    found = []
    placed_on: dict[str, str] = {}
    cpu_only: set[str] = set()
    for instance, status, start, end, gpus, product, node_now, params, region in _intervals(
        since, now
    ):
        params = params or {}
        if params.get("node"):  # a placement: with its GPUs unless it says none
            if str(params.get("gpus")) == "0":  # stored as text
                cpu_only.add(instance)
            else:
                cpu_only.discard(instance)
        node = params.get("node") or placed_on.get(instance) or node_now
        placed_on[instance] = node
        if status not in HOLDS_GPUS or instance in cpu_only:
            continue
        start, end = max(start, since), min(end or now, now)
        if end > start:
            found.append(Stretch(instance, start, end, gpus, product, node, region))
    return found


def _spread(
    start: datetime, end: datetime, first: datetime, amount: float, into: list[float]
) -> None:
    """Adds `amount` × the seconds of [start, end) that fall in each hour from `first`."""
    index = max(int((start - first).total_seconds() // 3600), 0)
    while index < len(into):
        hour = first + timedelta(hours=index)
        if hour >= end:
            break
        overlap = min(end, hour + timedelta(hours=1)) - max(start, hour)
        into[index] += amount * overlap.total_seconds()
        index += 1


def _usage(now: datetime, hours: list[datetime]) -> tuple[list[ModelUse], list[NodeRow]]:
    first = hours[0]
    nodes = list(  # CPU-only nodes hold no GPUs
        Node.objects.filter(gpu_count__gt=0)
        .order_by("name")
        .values_list("name", "gpu_product", "gpu_count")
    )
    names = dict(GpuModel.objects.values_list("product", "name"))
    totals: dict[str, int] = defaultdict(int)
    for _name, product, count in nodes:
        totals[product] += count
    by_model: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(hours))
    by_node: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(hours))
    for held in held_stretches(first, now):
        _spread(held.start, held.end, first, held.gpus, by_model[held.product])
        if held.node:
            _spread(held.start, held.end, first, held.gpus, by_node[held.node])
    # An hour's seconds: the current hour has run only until now.
    seconds = [min(3600.0, (now - hour).total_seconds()) or 1.0 for hour in hours]
    models = [
        ModelUse(
            product=product,
            name=names.get(product, product),
            total=total,
            percent=[
                round(100 * used / (total * span), 1) if total else 0.0
                for used, span in zip(by_model[product], seconds, strict=True)
            ],
        )
        for product, total in sorted(totals.items())
    ]
    rows = [
        NodeRow(
            name=name,
            product=product,
            gpu_count=count,
            gpus=[round(used / span, 2) for used, span in zip(by_node[name], seconds, strict=True)],
        )
        for name, product, count in nodes
    ]
    return models, rows


def _revenue(now: datetime) -> list[dict[str, Any]]:
    """Usage debits per day of the last 30 (today included), split into cash and trial
    credit; days without usage are zero."""
    today = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=DAYS - 1)
    rows = (
        LedgerTransaction.objects.filter(
            kind=TransactionKind.USAGE, amount_fen__lt=0, created_at__gte=first
        )
        .annotate(day=TruncDay("created_at"))
        .values("day")
        .annotate(revenue=Sum("amount_fen"), cash=Sum("cash_delta_fen"))
        .order_by()
    )
    found: dict[date, dict[str, Any]] = {
        timezone.localtime(row["day"]).date(): dict(row) for row in rows
    }
    days = []
    for offset in range(DAYS):
        day = (first + timedelta(days=offset)).date()
        row = found.get(day, {})
        days.append(
            {
                "day": day,
                "revenue_fen": -(row.get("revenue") or 0),
                "cash_fen": -(row.get("cash") or 0),
            }
        )
    return days


def _tenants(now: datetime) -> list[dict[str, Any]]:
    """The tenants that spent most on usage in the last 30 days, with the GPUs they run now."""
    rows = list(
        LedgerTransaction.objects.filter(
            kind=TransactionKind.USAGE,
            amount_fen__lt=0,
            created_at__gte=now - timedelta(days=DAYS),
        )
        .values(tenant_id=F("wallet__tenant_id"), tenant_name=F("wallet__tenant__name"))
        .annotate(spent=Sum("amount_fen"))
        .order_by("spent", "tenant_id")[:TOP_TENANTS]
    )
    running = dict(
        Instance.objects.filter(
            tenant_id__in=[row["tenant_id"] for row in rows], status=InstanceStatus.RUNNING
        )
        .values_list("tenant_id")
        .annotate(gpus=Sum("offering__gpu_count"))
        .order_by()
    )
    return [
        {
            "id": row["tenant_id"],
            "name": row["tenant_name"],
            "spent_fen": -row["spent"],
            "running_gpus": running.get(row["tenant_id"], 0),
        }
        for row in rows
    ]


def _queue(now: datetime) -> list[dict[str, Any]]:
    rows = (
        Holding.objects.filter(state=HoldingState.QUEUED)
        .values(product=F(MODEL), model_name=F("offering__gpu_model__name"))
        .annotate(orders=Count("id"), gpus=Sum("offering__gpu_count"), oldest=Min("queued_at"))
        .order_by("product")
    )
    return [{**row, "wait": now - row["oldest"] if row["oldest"] else timedelta(0)} for row in rows]


def operator_overview(now: datetime | None = None) -> Overview:
    """Everything the overview page shows, as of `now`: seven queries."""
    now = now or timezone.now()
    current = now.replace(minute=0, second=0, microsecond=0)
    hours = [current - timedelta(hours=HOURS - 1 - i) for i in range(HOURS)]
    models, nodes = _usage(now, hours)
    return Overview(
        now=now,
        hours=hours,
        models=models,
        nodes=nodes,
        days=_revenue(now),
        tenants=_tenants(now),
        queue=_queue(now),
    )


# What Holding.billing names a spot (interruptible) holding: the spot part of issue 28 adds
# the choice; the overview reads the value, whichever app defines it.
SPOT = "spot"


@dataclass
class CapacityMix:
    """One GPU model in one region: its GPUs now by who holds them (hourly, monthly, spot; the
    rest idle, or out of service: lost, or on a node not ready; those kept from spot: for
    the paying orders that SPOT_HEADROOM lets start on arrival), and over the last 30 days
    the allocation rate (GPU-hours held ÷ GPU-hours its GPUs now in the fleet offer), the spot
    revenue (usage posted for spot holdings, cash and trial credit) and the preemptions (spot
    holdings whose GPUs were taken back: Holding.preempted_at in the window)."""

    product: str
    name: str
    region: str
    total: int
    hourly: int = 0
    monthly: int = 0
    spot: int = 0
    out_of_service: int = 0
    kept_from_spot: int = 0
    allocation_pct: float = 0.0
    spot_revenue_fen: int = 0
    preemptions: int = 0

    @property
    def idle(self) -> int:
        return max(self.total - self.hourly - self.monthly - self.spot - self.out_of_service, 0)


def _mix_rows() -> dict[tuple[str, str], CapacityMix]:
    """The GPU nodes' GPUs per (product, region), with who holds them now."""
    rows: dict[tuple[str, str], CapacityMix] = {}
    nodes = (
        Node.objects.filter(gpu_count__gt=0)
        .annotate(
            model_name=Subquery(
                GpuModel.objects.filter(product=OuterRef("gpu_product")).values("name")[:1]
            ),
            lost=Count("gpus", filter=Q(gpus__lost_at__isnull=False)),
        )
        .values_list("gpu_product", "region_id", "state", "gpu_count", "model_name", "lost")
    )
    for product, region, ready, count, name, lost in nodes:
        row = rows.setdefault((product, region), CapacityMix(product, name or product, region, 0))
        row.total += count
        # a node not ready is out of service whole; a ready one by its lost GPUs
        row.out_of_service += count if ready != NodeState.READY else lost
    held = (
        Allocation.objects.values(
            "node__gpu_product", "node__region_id", "node__state", "holding__billing"
        )
        .annotate(gpus=Count("id"))
        .order_by()
    )
    for entry in held:
        found = rows.get((entry["node__gpu_product"], entry["node__region_id"]))
        if found is None:
            continue
        billing = entry["holding__billing"]
        field_name = {"monthly": "monthly", SPOT: "spot"}.get(billing, "hourly")
        setattr(found, field_name, getattr(found, field_name) + entry["gpus"])
        if entry["node__state"] != NodeState.READY:  # held, not out of service
            found.out_of_service -= entry["gpus"]
    return rows


def capacity_mix(now: datetime | None = None) -> list[CapacityMix]:
    """CapacityMix per GPU model and region, in product and region order: a handful of
    aggregate queries and one read of the last 30 days' GPU-holding stretches."""
    now = now or timezone.now()
    since = now - timedelta(days=DAYS)
    rows = _mix_rows()
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    for held in held_stretches(since, now):
        seconds[held.product, held.region] += held.gpus * (held.end - held.start).total_seconds()
    window = (now - since).total_seconds()
    for key, row in rows.items():
        if row.total:
            row.allocation_pct = round(100 * seconds[key] / (row.total * window), 1)
    spot = Holding.objects.filter(billing=SPOT, pk=OuterRef("instance_id"))
    revenue = (
        LedgerTransaction.objects.filter(
            kind=TransactionKind.USAGE, amount_fen__lt=0, created_at__gte=since
        )
        .annotate(
            product=Subquery(spot.values("offering__gpu_model__product")[:1]),
            region=Subquery(spot.values("region_id")[:1]),
        )
        .filter(product__isnull=False)
        .values_list("product", "region")
        .annotate(fen=Sum("amount_fen"))
        .order_by()
    )
    for product, region, fen in revenue:
        if (product, region) in rows:
            rows[product, region].spot_revenue_fen += -fen
    preempted = (
        Holding.objects.filter(preempted_at__gte=since)
        .values_list("offering__gpu_model__product", "region_id")
        .annotate(count=Count("id"))
        .order_by()
    )
    for product, region, count in preempted:
        if (product, region) in rows:
            rows[product, region].preemptions += count
    if settings.SPOT_HEADROOM > 0:
        for product in sorted({product for product, _region in rows}):
            kept = headroom(product).kept
            for node_id, region in Node.objects.filter(pk__in=list(kept)).values_list(
                "pk", "region_id"
            ):
                if (product, region) in rows:
                    rows[product, region].kept_from_spot += kept[node_id]
    return [rows[key] for key in sorted(rows)]
