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
from typing import Any

from django.db.models import Count, F, Min, Q, Sum, Window
from django.db.models.functions import Lead, TruncDay
from django.utils import timezone

from billing.choices import TransactionKind
from billing.models import LedgerTransaction
from compute.choices import HoldingState
from compute.models import Holding
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
        )
    )


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
    nodes = list(Node.objects.order_by("name").values_list("name", "gpu_product", "gpu_count"))
    names = dict(GpuModel.objects.values_list("product", "name"))
    totals: dict[str, int] = defaultdict(int)
    for _name, product, count in nodes:
        totals[product] += count
    by_model: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(hours))
    by_node: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(hours))
    placed_on: dict[str, str] = {}
    for instance, status, start, end, gpus, product, node_now, params in _intervals(first, now):
        node = (params or {}).get("node") or placed_on.get(instance) or node_now
        placed_on[instance] = node
        if status not in HOLDS_GPUS:
            continue
        start, end = max(start, first), min(end or now, now)
        if end <= start:
            continue
        _spread(start, end, first, gpus, by_model[product])
        if node:
            _spread(start, end, first, gpus, by_node[node])
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
