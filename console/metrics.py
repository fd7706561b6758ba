"""The platform's numbers as the database holds them, computed when Prometheus scrapes: a
handful of aggregate queries (GROUP BY GPU model, state or kind), never a query per row, so a
scrape costs the same with ten instances or ten thousand (the fleet's capacity and the nodes'
report lag are per node, and nodes are few).

Counters here are counts and sums over rows that are never changed or deleted (ledger
transactions, orders, failure events, Stripe attempts), so they only grow, as Prometheus
expects of a counter, and every web replica answers the same. Label `gpu_model` is the NVML
product name, as dcgm-exporter's `modelName`, so platform and GPU panels join on it."""

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.db.models.functions import Abs
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from billing.models import LedgerTransaction, StripeEvent, Wallet
from compute.choices import HoldingState
from compute.models import Holding
from compute.selectors import capacity_by_model
from fleet.choices import NodeState
from fleet.models import Node
from instances.choices import InstanceStatus
from instances.models import Instance, InstanceEvent

MODEL = "offering__gpu_model__product"


def _age_s(now: datetime, then: datetime | None) -> float:
    return max((now - then).total_seconds(), 0.0) if then else 0.0


class PlatformCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield from self._orders(now)
        yield from self._fleet(now)
        yield from self._money()

    def _orders(self, now: datetime) -> Iterator[Metric]:
        """The orders' metrics, group by group: instance states, the queue, provisioning,
        order-to-running time and failures, each one aggregate query."""
        yield from self._instance_counts()
        yield from self._queue(now)
        yield from self._provisioning(now)
        yield from self._to_running()
        yield from self._failures()

    def _instance_counts(self) -> Iterator[Metric]:
        """Instances, and their GPUs, by GPU model and state, and the orders placed (every
        instance row is one) by GPU model: one GROUP BY."""
        instances = GaugeMetricFamily(
            "starverse_instances",
            "Orders (instances) by GPU model and current state.",
            labels=["gpu_model", "status"],
        )
        gpus = GaugeMetricFamily(
            "starverse_instance_gpus",
            "GPUs of the instances by GPU model and current state (status=running: GPUs rented).",
            labels=["gpu_model", "status"],
        )
        orders = CounterMetricFamily(
            "starverse_orders", "Orders placed, by GPU model.", labels=["gpu_model"]
        )
        per_model: dict[str, int] = {}
        rows = Instance.objects.values(MODEL, "status").annotate(
            n=Count("id"), gpus=Sum("offering__gpu_count")
        )
        for row in rows.order_by():
            instances.add_metric([row[MODEL], row["status"]], row["n"])
            gpus.add_metric([row[MODEL], row["status"]], row["gpus"] or 0)
            per_model[row[MODEL]] = per_model.get(row[MODEL], 0) + row["n"]
        for model, n in sorted(per_model.items()):
            orders.add_metric([model], n)
        yield from (instances, gpus, orders)

    def _queue(self, now: datetime) -> Iterator[Metric]:
        """The queue by GPU model: how many holdings wait for GPUs and how long the oldest
        has waited."""
        length = GaugeMetricFamily(
            "starverse_queue_length", "Orders waiting for GPUs, by GPU model.", labels=["gpu_model"]
        )
        wait = GaugeMetricFamily(
            "starverse_queue_wait_seconds_max",
            "How long the oldest queued order of each GPU model has waited.",
            labels=["gpu_model"],
        )
        queued = Holding.objects.filter(state=HoldingState.QUEUED).values(MODEL)
        for row in queued.annotate(n=Count("id"), oldest=Min("queued_at")).order_by():
            length.add_metric([row[MODEL]], row["n"])
            wait.add_metric([row[MODEL]], _age_s(now, row["oldest"]))
        yield from (length, wait)

    def _provisioning(self, now: datetime) -> Iterator[Metric]:
        """Provisionings now in progress by GPU model, and how long the oldest has run."""
        provisioning = GaugeMetricFamily(
            "starverse_provisioning_in_progress",
            "Instances being provisioned now, by GPU model.",
            labels=["gpu_model"],
        )
        oldest = GaugeMetricFamily(
            "starverse_provisioning_oldest_seconds",
            "How long the longest provisioning now in progress has run, by GPU model.",
            labels=["gpu_model"],
        )
        current = Instance.objects.filter(status=InstanceStatus.PROVISIONING).values(MODEL)
        for row in current.annotate(
            n=Count("id"), since=Min("pod_watch__provisioning_since")
        ).order_by():
            provisioning.add_metric([row[MODEL]], row["n"])
            oldest.add_metric([row[MODEL]], _age_s(now, row["since"]))
        yield from (provisioning, oldest)

    def _to_running(self) -> Iterator[Metric]:
        """From order to first running by GPU model, as a summary (count and sum), so that
        Prometheus can divide them for the mean over any window."""
        to_running = SummaryMetricFamily(
            "starverse_order_to_running_seconds",
            "From an order to its instance's first running (a queue wait included), by GPU model.",
            labels=["gpu_model"],
        )
        took = ExpressionWrapper(F("started_at") - F("created_at"), output_field=DurationField())
        started = Instance.objects.filter(started_at__isnull=False).values(MODEL)
        for row in started.annotate(n=Count("id"), total=Sum(took)).order_by():
            total = row["total"].total_seconds() if row["total"] else 0.0
            to_running.add_metric([row[MODEL]], count_value=row["n"], sum_value=total)
        yield to_running

    def _failures(self) -> Iterator[Metric]:
        """Instances that failed by GPU model, counted by their failure events (never
        deleted, so the counter only grows)."""
        failures = CounterMetricFamily(
            "starverse_instance_failures",
            "Instances that failed (provisioning timed out or refused, node lost), by GPU model.",
            labels=["gpu_model"],
        )
        event_model = "instance__" + MODEL
        failed = InstanceEvent.objects.filter(status=InstanceStatus.FAILED).values(event_model)
        for row in failed.annotate(n=Count("id")).order_by():
            failures.add_metric([row[event_model]], row["n"])
        yield failures

    def _fleet(self, now: datetime) -> Iterator[Metric]:
        fleet = GaugeMetricFamily(
            "starverse_fleet_gpus",
            "GPUs of the fleet by GPU model and state (allocated, free, unhealthy).",
            labels=["gpu_model", "state"],
        )
        for entry in capacity_by_model():
            for state in ("allocated", "free", "unhealthy"):
                fleet.add_metric([entry["gpu_product"], state], entry[state])
        yield fleet

        nodes = GaugeMetricFamily("starverse_fleet_nodes", "GPU nodes by state.", labels=["state"])
        counts = dict(Node.objects.values_list("state").annotate(n=Count("id")).order_by())
        for state in NodeState.values:
            nodes.add_metric([state], counts.get(state, 0))
        yield nodes

        lag = GaugeMetricFamily(
            "starverse_node_report_lag_seconds",
            "Seconds since each node's agent last reported (since it was added, if never).",
            labels=["node", "gpu_model", "state"],
        )
        rows = Node.objects.values_list(
            "name", "gpu_product", "state", "last_report_at", "created_at"
        )
        for name, product, state, last, created in rows.order_by("name"):
            lag.add_metric([name, product, state], _age_s(now, last or created))
        yield lag

    def _money(self) -> Iterator[Metric]:
        count = CounterMetricFamily(
            "starverse_ledger_transactions",
            "Ledger transactions posted, by kind (usage: GPU minutes, one an hour a holding).",
            labels=["kind"],
        )
        fen = CounterMetricFamily(
            "starverse_ledger_fen",
            "Money moved by ledger transactions, in fen, by kind (usage: revenue from rentals).",
            labels=["kind"],
        )
        rows = LedgerTransaction.objects.values("kind").annotate(
            n=Count("id"), fen=Sum(Abs("amount_fen"))
        )
        for row in rows.order_by("kind"):
            count.add_metric([row["kind"]], row["n"])
            fen.add_metric([row["kind"]], row["fen"] or 0)
        yield from (count, fen)
        pending = GaugeMetricFamily(
            "starverse_usage_pending_fen",
            "GPU usage accrued by the meter and not yet posted to the ledger (posted by the "
            "hour and at every stop), in fen.",
        )
        held = Wallet.objects.aggregate(fen=Sum(F("pending_cash_fen") + F("pending_promo_fen")))
        pending.add_metric([], held["fen"] or 0)
        yield pending

        events = StripeEvent.objects.aggregate(
            received=Count("id"),
            processed=Count("id", filter=Q(processed_at__isnull=False)),
            failing=Count("id", filter=Q(processed_at__isnull=True) & ~Q(error="")),
            attempts=Sum("attempts"),
        )
        received = CounterMetricFamily(
            "starverse_stripe_events_received", "Stripe webhook events received (each once)."
        )
        received.add_metric([], events["received"])
        attempts = CounterMetricFamily(
            "starverse_stripe_event_attempts", "Attempts at processing Stripe webhook events."
        )
        attempts.add_metric([], events["attempts"] or 0)
        outcome = GaugeMetricFamily(
            "starverse_stripe_events",
            "Stripe webhook events by outcome: processed, failing (an attempt raised; retried "
            "every 5 minutes), pending (not yet attempted).",
            labels=["outcome"],
        )
        pending = events["received"] - events["processed"] - events["failing"]
        outcome.add_metric(["processed"], events["processed"])
        outcome.add_metric(["failing"], events["failing"])
        outcome.add_metric(["pending"], pending)
        yield from (received, attempts, outcome)
