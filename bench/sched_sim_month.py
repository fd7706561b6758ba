"""sched_sim_month: a month of a GPU region, simulated event by event through the real code.

A discrete-event simulation with a simulated clock (django.utils.timezone.now follows it, so
every timestamp the product writes, queue places and metering sessions included, is simulated
time): each order of the workload arrives at its time through instances.lifecycle.
instance_order (admission, the queue, placement, on PostgreSQL), runs from the moment it is
placed (instances.states.instance_mark_running: the meter opens) and ends after its duration
(instance_terminate, then the pod-gone report); whenever GPUs free up the queue is served
(queue_drain), which is also where a paying order takes spot GPUs back (compute.preemption):
a preempted spot instance's GPUs go SPOT_PREEMPT_GRACE_S later (the pod-gone report of its
stop), and it starts again (instance_start: back in line behind every paying order) with the
work it had left. The meter ticks every simulated hour (compute.metering.meter_tick); revenue
is what the wallets paid.

The same workload runs twice, on a fresh database each: as it is, and without its spot
orders (the baseline), and the bench prints, as the other benches do,
  {"bench": "sched_sim_month", "value": <allocation with spot>, "baseline": <without>}
  {"bench": "sched_sim_wait_p99", "ratio": <on-demand wait p99 with spot / without>}
plus a line of details (on-demand wait p50/p99, preemptions per spot GPU-hour, revenue).
Allocation is GPU-hours held ÷ GPU-hours that exist over the month. The rows' ids are drawn
from a seeded generator (seeded_ids), so that the ties the product breaks by id fall the same
way every run: the same code and arguments print the same figures.

Workload: `--workload FILE`, a CSV with the columns arrival_s,gpus,nodes,duration_s,billing
(billing: hourly, monthly or spot; one order a line). Multi-node orders (nodes > 1) are refused:
the simulation places single-node orders only. Without one, a workload is generated (seeded)
from distributions shaped after the Microsoft Philly trace (Jeon et al., "Analysis of
Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC 2019): most
jobs ask for one GPU, a minority for 2, 4 or 8, and durations are heavy-tailed, from minutes
to days; arrivals are Poisson with a daily cycle. The parameters below (SIZES, the lognormal
duration's median and sigma) are this bench's approximation of those published shapes, not
values read from the trace.

Spot demand is a standing backlog, not Poisson arrivals (`--spot-backlog K`, by default one per
GPU of the region for a generated workload): K batch submitters each keep one spot order in
the system, submitting the next (size and duration drawn as SPOT_MEDIAN_S says) when the last
one ends, the closed-loop model of batch users (Schroeder, Wierman and Harchol-Balter, "Open
Versus Closed: A Cautionary Tale", NSDI 2006: a user who waits for a job before submitting
the next). Interruptible markets hold work that waits for idle GPUs: SkyPilot's managed spot
jobs and Vast.ai's interruptible bids stay queued until capacity frees, and hyper-parameter
sweeps and batch inference hold more jobs than GPUs. One submitter per GPU keeps at least as
much spot work waiting as the region has GPUs (each order asks for 1.98 GPUs on average), so
what the bench measures is whether the queue lets that work use the idle GPUs, not whether
some happened to arrive. A CSV workload's spot rows are replayed as they are, and no backlog
is added unless `--spot-backlog` asks.

Idle GPU-hours are printed by cause (`idle_gpu_hours`): no order waiting ("no_demand"), an
order waiting that would fit on one node's free GPUs but the queue holds it back ("queue":
head-of-line blocking without backfilling, GPUs kept for an order ahead with it), enough free
GPUs in all but on no one node ("fragmentation"), every waiting order larger than the free
GPUs ("too_large"), and GPUs of spot holdings under notice ("grace").

Scale: the issue's region is 1,024 nodes (8,192 GPUs); a month of it is ~10^6 orders, far from
the ten minutes allowed on this machine, so `--nodes` and `--days`
scale it down with the same load per GPU (defaults NODES, DAYS); the figures printed say which
scale ran.
`--spot-headroom N` runs the month with spot under SPOT_HEADROOM=N (GPUs kept for the next N
paying orders of each size: compute.preemption.headroom); the baseline has no spot either way.

Run alone: `python -m bench.sched_sim_month [--nodes N] [--days D] [--workload FILE]
[--spot-backlog K] [--seed S] [--spot-headroom N]`."""

import argparse
import csv
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import recreate_database, report, setup_django

PRODUCT = "NVIDIA H100 80GB HBM3"
# The scale `make bench` runs by default: what fits in ten minutes on the shared development
# machine (see the docstring and docs/capacity.md), not the 1,024 nodes.
NODES, DAYS = 2, 7.0
GPUS = 8
SEED = 28
START = datetime(2026, 1, 5, tzinfo=UTC)
# Request sizes (GPUs of one node, probability), shaped after Philly's: mostly one GPU.
SIZES = ((1, 0.70), (2, 0.12), (4, 0.10), (8, 0.08))
# Durations: lognormal, median and sigma (heavy-tailed, minutes to days), capped at a week.
MEDIAN_S, SIGMA, MOST_S = 45 * 60, 1.8, 7 * 86400
# Offered load of paying (hourly) orders, in GPU-hours per GPU-hour of the region.
PAYING_LOAD = 0.80
# Spot work is batch work: longer runs (a standing backlog: see the docstring).
SPOT_MEDIAN_S = 3 * 3600


@dataclass(frozen=True)
class Order:
    arrival_s: float
    gpus: int
    nodes: int
    duration_s: float
    billing: str


def workload_read(path: str) -> list[Order]:
    with open(path, newline="") as handle:
        rows = [
            Order(
                float(row["arrival_s"]),
                int(row["gpus"]),
                int(row.get("nodes") or 1),
                float(row["duration_s"]),
                row["billing"].strip(),
            )
            for row in csv.DictReader(handle)
        ]
    for order in rows:
        if order.nodes != 1 or order.gpus not in (1, 2, 4, 8):
            raise SystemExit(f"{path}: only single-node orders of 1, 2, 4 or 8 GPUs: {order}")
        if order.billing not in ("hourly", "monthly", "spot"):
            raise SystemExit(f"{path}: billing is hourly, monthly or spot: {order}")
    return sorted(rows, key=lambda o: o.arrival_s)


def _draw(picker: random.Random, median: float) -> tuple[int, float]:
    """A request's size and duration, shaped after Philly's (SIZES, lognormal durations)."""
    gpus = picker.choices([g for g, _p in SIZES], [p for _g, p in SIZES])[0]
    duration = min(picker.lognormvariate(math.log(median), SIGMA), MOST_S)
    return gpus, max(duration, 60.0)


def workload_generate(nodes: int, days: float, seed: int = SEED) -> list[Order]:
    """Paying orders whose offered GPU-hours are PAYING_LOAD of the region's (the spot
    backlog is added as the simulation runs: _Sim._spot_submit)."""
    picker = random.Random(seed)
    horizon = days * 86400
    orders: list[Order] = []
    mean_gpus = sum(g * p for g, p in SIZES)
    mean_s = min(MEDIAN_S * math.exp(SIGMA**2 / 2), MOST_S)
    rate = PAYING_LOAD * nodes * GPUS / (mean_gpus * mean_s)  # orders a second
    t = 0.0
    while True:
        # a daily cycle: busier by day
        t += picker.expovariate(rate * (1 + 0.5 * math.sin(2 * math.pi * t / 86400)))
        if t >= horizon:
            break
        gpus, duration = _draw(picker, MEDIAN_S)
        orders.append(Order(t, gpus, 1, duration, "hourly"))
    return orders


class _SeededSecrets:
    """What starverse.core.ids asks of `secrets`, from a seeded generator: the rows' ids, and
    with them every tie the product breaks by id (nodes of equal fit, orders queued at the
    same simulated moment), are the same in every run, so a run's figures are reproducible."""

    def __init__(self, seed: int) -> None:
        self.picker = random.Random(seed)

    def choice(self, seq: str) -> str:
        return seq[self.picker.randrange(len(seq))]

    def token_bytes(self, count: int) -> bytes:
        return self.picker.randbytes(count)


@contextmanager
def seeded_ids(seed: int) -> Iterator[None]:
    from starverse.core import ids

    names = vars(ids)  # the module's own `secrets`, which new_id and new_ids read
    real = names["secrets"]
    names["secrets"] = _SeededSecrets(seed)
    try:
        yield
    finally:
        names["secrets"] = real


class Clock:
    """The simulated clock: django.utils.timezone.now answers it while the simulation runs."""

    def __init__(self) -> None:
        self.now = START

    @contextmanager
    def installed(self) -> Iterator[None]:
        from django.utils import timezone

        real = timezone.now
        timezone.now = lambda: self.now
        try:
            yield
        finally:
            timezone.now = real


@dataclass
class Held:
    order: Order
    left_s: float
    since_s: float | None = None
    generation: int = 0


# Why GPUs sat idle (see the docstring).
CAUSES = ("no_demand", "queue", "fragmentation", "too_large", "grace")


@dataclass
class Result:
    held_gpu_s: float = 0.0
    spot_gpu_s: float = 0.0
    preemptions: int = 0
    waits: list[float] = field(default_factory=list)
    revenue_fen: int = 0
    orders: int = 0
    seconds: float = 0.0
    idle_gpu_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))


def _fleet(nodes: int) -> None:
    from fleet.models import Node

    Node.objects.bulk_create(
        [
            Node(
                name=f"gpu-h100-{n:04d}",
                gpu_product=PRODUCT,
                gpu_count=GPUS,
                gpu_memory_mb=81559,
                switch=f"leaf-{n // 32:02d}",
            )
            for n in range(nodes)
        ]
    )


def simulate(
    orders: list[Order],
    *,
    nodes: int,
    days: float,
    spot_backlog: int = 0,
    seed: int = SEED,
    headroom: int = 0,
) -> Result:
    """One month (`days`) of `orders`, and `spot_backlog` spot submitters (see the docstring),
    on a fresh database of `nodes` nodes; `seed` draws the rows' ids and the backlog's orders;
    `headroom`: SPOT_HEADROOM."""
    recreate_database()
    setup_django()
    from django.core.management import call_command
    from django.test import override_settings

    with (
        seeded_ids(seed + 2),
        override_settings(
            MAX_QUEUED_ORDERS=10**7,
            MAX_RUNNING_GPUS=10**7,
            KUBECONFIG="",
            SPOT_PREEMPT_GRACE_S=30,
            SPOT_HEADROOM=headroom,
        ),
    ):
        call_command("seed_catalog", verbosity=0)
        return _Sim(orders, nodes=nodes, days=days, spot_backlog=spot_backlog, seed=seed).run()


class _Sim:
    def __init__(
        self, orders: list[Order], *, nodes: int, days: float, spot_backlog: int, seed: int
    ) -> None:
        from bench.instances import _users
        from billing.models import Wallet
        from compute.models import Offering
        from fleet.models import Node

        _fleet(nodes)
        self.orders, self.horizon = list(orders), days * 86400
        self.backlog, self.looped, self.picker = spot_backlog, set[str](), random.Random(seed + 1)
        self.node_of: dict[str, str] = {}
        self.used: dict[str, int] = dict.fromkeys(Node.objects.values_list("id", flat=True), 0)
        self.noticed_gpus, self.last_t = 0, 0.0
        self.clock = Clock()
        self.users = _users(8, prefix="sim")  # each with ¥10 M of cash
        self.funds = {w.pk: w.cash_free_fen for w in Wallet.objects.all()}
        self.offerings = {
            o.gpu_count: o.id
            for o in Offering.objects.filter(gpu_model__product=PRODUCT, kind="cloud")
        }
        self.whole = Offering.objects.get(gpu_model__product=PRODUCT, kind="bare_metal").id
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.held: dict[str, Held] = {}
        self.arrived: dict[str, float] = {}
        self.result = Result(orders=len(orders))

    def at(self, t: float, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def run(self) -> Result:
        started = time.perf_counter()
        for index, order in enumerate(self.orders):
            self.at(order.arrival_s, "arrive", index)
        for _submitter in range(self.backlog):
            self.at(0.0, "spot", None)
        for hour in range(1, int(self.horizon // 3600) + 1):
            self.at(hour * 3600.0, "tick", None)
        with self.clock.installed():
            while self.events and self.events[0][0] <= self.horizon:
                t, _seq, kind, payload = heapq.heappop(self.events)
                self._idle_until(t)
                self.clock.now = START + timedelta(seconds=t)
                getattr(self, f"_{kind}")(t, payload)
            self._idle_until(self.horizon)
            self._close(self.horizon)
        self.result.orders = len(self.orders)
        self.result.seconds = time.perf_counter() - started
        return self.result

    def _idle_until(self, t: float) -> None:
        """Count the GPUs idle since the last event, by cause (CAUSES)."""
        span, self.last_t = t - self.last_t, t
        if span <= 0:
            return
        self.result.idle_gpu_s["grace"] += self.noticed_gpus * span
        free = [GPUS - used for used in self.used.values()]
        if not sum(free):
            return
        smallest = min((self.held[i].order.gpus for i in self.arrived), default=None)
        if smallest is None:
            cause = "no_demand"
        elif smallest <= max(free):
            cause = "queue"
        else:
            cause = "fragmentation" if smallest <= sum(free) else "too_large"
        self.result.idle_gpu_s[cause] += sum(free) * span

    # --- events ------------------------------------------------------------------------------

    def _spot(self, t: float, _payload: None) -> None:
        """A backlog submitter's next spot order (see the docstring)."""
        gpus, duration = _draw(self.picker, SPOT_MEDIAN_S)
        self.orders.append(Order(t, gpus, 1, duration, "spot"))
        self.looped.add(self._arrive(t, len(self.orders) - 1))

    def _arrive(self, t: float, index: int) -> str:
        from django.conf import settings

        from instances.lifecycle import instance_order

        order = self.orders[index]
        user = self.users[index % len(self.users)]
        offering = self.whole if order.billing == "monthly" else self.offerings[order.gpus]
        instance, _created = instance_order(
            user=user,
            offering_id=offering,
            image_id="pytorch-2.1",
            billing=order.billing,
            idle_stop=None,
        )
        self.held[instance.id] = Held(order, order.duration_s)
        self.arrived[instance.id] = t
        if instance.status == "provisioning":
            self._started(t, [instance.id])
            if order.billing != "spot" and settings.SPOT_HEADROOM:
                self._drain(t)  # as the order's drain_queue task: headroom taken, freed again
        else:
            self._drain(t)  # a paying order that waits takes spot GPUs back
        return instance.id

    def _started(self, t: float, ids: list[str]) -> None:
        from compute.models import Allocation
        from instances.states import instance_mark_running

        for instance_id in ids:
            instance_mark_running(instance_id)
            held = self.held[instance_id]
            node = Allocation.objects.filter(holding_id=instance_id).values_list(
                "node_id", flat=True
            )[0]
            self.node_of[instance_id] = node
            self.used[node] += held.order.gpus
            if instance_id in self.arrived:
                if held.order.billing != "spot":
                    self.result.waits.append(t - self.arrived.pop(instance_id))
                else:
                    self.arrived.pop(instance_id)
            held.since_s = t
            self.at(t + held.left_s, "end", (instance_id, held.generation))

    def _end(self, t: float, payload: tuple[str, int]) -> None:
        from instances.lifecycle import instance_terminate
        from instances.states import instance_mark_terminated

        instance_id, generation = payload
        held = self.held[instance_id]
        if generation != held.generation:
            return  # preempted meanwhile
        self._account(held, t)
        instance_terminate(instance_id=instance_id)
        instance_mark_terminated(instance_id, disk_claim="")
        del self.held[instance_id]
        self.used[self.node_of.pop(instance_id)] -= held.order.gpus
        if instance_id in self.looped:
            self.looped.discard(instance_id)
            self._spot(t, None)  # its submitter's next order
        self._drain(t)

    def _taken(self, t: float, instance_id: str) -> None:
        """A preempted spot instance's pod is gone at its deadline: its GPUs go to the queue,
        and it starts again (back in line) with the work it had left."""
        from instances.lifecycle import instance_start
        from instances.states import instance_mark_stopped

        instance_mark_stopped(instance_id)
        gpus = self.held[instance_id].order.gpus
        self.noticed_gpus -= gpus
        self.used[self.node_of.pop(instance_id)] -= gpus
        self.arrived[instance_id] = t
        if instance_start(instance_id=instance_id).status == "provisioning":
            self._started(t, [instance_id])
        self._drain(t)

    def _tick(self, t: float, _payload: None) -> None:
        from compute.metering import meter_tick

        meter_tick(now=self.clock.now)

    # --- the queue and preemption ------------------------------------------------------------

    def _drain(self, t: float) -> None:
        from compute.models import Holding
        from instances.lifecycle import queue_drain

        placed = queue_drain(product=PRODUCT, now=self.clock.now)
        self._started(t, placed)
        # in a fixed order: holdings noticed together share a deadline, and whichever is
        # restarted first (instance_start, at that deadline) decides the rest of the run
        noticed = (
            Holding.objects.filter(preempt_at__isnull=False, state="placed")
            .order_by("preempt_at", "id")
            .values_list("id", "preempt_at")
        )
        for instance_id, deadline in noticed:
            held = self.held.get(instance_id)
            if held is None or held.since_s is None or deadline is None:
                continue
            self._account(held, t)
            held.left_s = max(held.left_s - (t - held.since_s), 60.0)
            held.since_s, held.generation = None, held.generation + 1
            self.result.preemptions += 1
            self.noticed_gpus += held.order.gpus
            self.at((deadline - START).total_seconds(), "taken", instance_id)

    def _account(self, held: Held, t: float) -> None:
        if held.since_s is None:
            return
        gpu_s = held.order.gpus * (t - held.since_s)
        self.result.held_gpu_s += gpu_s
        if held.order.billing == "spot":
            self.result.spot_gpu_s += gpu_s

    def _close(self, horizon: float) -> None:
        from billing.models import Wallet
        from compute.metering import meter_tick

        for held in self.held.values():
            self._account(held, horizon)
        # orders still waiting at the end count as waiting until then
        for instance_id, arrived in self.arrived.items():
            if self.held[instance_id].order.billing != "spot":
                self.result.waits.append(horizon - arrived)
        meter_tick(now=self.clock.now)
        self.result.revenue_fen = sum(
            self.funds[w.pk] - w.cash_free_fen for w in Wallet.objects.all() if w.pk in self.funds
        )


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m bench.sched_sim_month")
    parser.add_argument("--workload", help="CSV: arrival_s,gpus,nodes,duration_s,billing")
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--days", type=float, default=DAYS)
    parser.add_argument(
        "--seed", type=int, default=SEED, help=f"the generated workload's and ids' (default {SEED})"
    )
    parser.add_argument(
        "--spot-backlog",
        type=int,
        help="spot submitters (default: one per GPU for a generated workload, 0 with a CSV)",
    )
    parser.add_argument(
        "--spot-headroom",
        type=int,
        default=0,
        help="SPOT_HEADROOM in the run with spot: paying orders of each size kept GPUs free",
    )
    args = parser.parse_args(argv or [])
    orders = (
        workload_read(args.workload)
        if args.workload
        else workload_generate(args.nodes, args.days, seed=args.seed)
    )
    backlog = args.spot_backlog
    if backlog is None:
        backlog = 0 if args.workload else args.nodes * GPUS
    with_spot = simulate(
        orders,
        nodes=args.nodes,
        days=args.days,
        spot_backlog=backlog,
        seed=args.seed,
        headroom=args.spot_headroom,
    )
    without = simulate(
        [o for o in orders if o.billing != "spot"], nodes=args.nodes, days=args.days, seed=args.seed
    )
    exist = args.nodes * GPUS * args.days * 86400
    lines = [
        report(
            "sched_sim_month",
            with_spot.held_gpu_s / exist,
            "GPU allocation rate (held ÷ existing GPU-hours), with spot",
            without.held_gpu_s / exist,
            "the same workload without its spot orders",
            ">= 0.95",
        )
    ]
    p99_with, p99_without = _pct(with_spot.waits, 0.99), _pct(without.waits, 0.99)
    lines.append(
        report(
            "sched_sim_wait_p99",
            p99_with,
            "s on-demand queue wait p99, with spot",
            p99_without,
            "without spot",
            "ratio <= 1.05",
        )
    )
    details = {
        "bench": "sched_sim_month_details",
        "scale": f"{args.nodes} nodes × {GPUS} GPUs, {args.days:g} days",
        "seed": args.seed,
        "spot_backlog": backlog,
        "spot_headroom": args.spot_headroom,
        "orders": with_spot.orders,
        "orders_without_spot": without.orders,
        "wait_p50_s": [
            statistics.median(with_spot.waits or [0]),
            statistics.median(without.waits or [0]),
        ],
        "wait_p99_s": [p99_with, p99_without],
        "preemptions_per_spot_gpu_hour": round(
            with_spot.preemptions / (with_spot.spot_gpu_s / 3600), 4
        )
        if with_spot.spot_gpu_s
        else None,
        "preemptions": with_spot.preemptions,
        "revenue_fen": [with_spot.revenue_fen, without.revenue_fen],
        "simulated_in_s": [round(with_spot.seconds, 1), round(without.seconds, 1)],
        "idle_gpu_hours": [
            {cause: round(s / 3600, 1) for cause, s in result.idle_gpu_s.items()}
            for result in (with_spot, without)
        ],
    }
    print(json.dumps(details, ensure_ascii=False), flush=True)
    return [*lines, details]


if __name__ == "__main__":
    setup_django()
    run(sys.argv[1:])
