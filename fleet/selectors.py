"""Reads of the fleet that more than one screen or route needs."""

from collections import defaultdict
from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from fleet.choices import NodeState
from fleet.models import Allocation, Gpu, GpuSample, Node, NodeProfile


def latest_samples(
    gpu_ids: list[int], *, within: timedelta = timedelta(minutes=2)
) -> dict[int, Any]:
    """The newest raw sample of each GPU, if it reported recently."""
    rows = GpuSample.objects.filter(gpu_id__in=gpu_ids, at__gte=timezone.now() - within).order_by(
        "gpu_id", "-at"
    )
    latest: dict[int, Any] = {}
    for row in rows:
        latest.setdefault(row.gpu_id, row)
    return latest


def fleet_nodes() -> QuerySet[Node]:
    return Node.objects.prefetch_related("gpus").order_by("name")


def capacity_by_model() -> list[dict[str, Any]]:
    """GPUs per product: total; allocated to instances; unhealthy (lost, or on a node out of
    service and not allocated); free (healthy, in service, not allocated)."""
    totals: dict[str, dict[str, int]] = defaultdict(
        lambda: {"total": 0, "allocated": 0, "unhealthy": 0}
    )
    lost = set(Gpu.objects.filter(lost_at__isnull=False).values_list("node_id", "index"))
    held = set(Allocation.objects.values_list("node_id", "gpu_index"))
    for node in Node.objects.all():
        entry = totals[node.gpu_product]
        entry["total"] += node.gpu_count
        for index in range(node.gpu_count):
            if (node.pk, index) in held:
                entry["allocated"] += 1
            elif node.state != NodeState.READY or (node.pk, index) in lost:
                entry["unhealthy"] += 1
    return [
        {"gpu_product": product, **v, "free": v["total"] - v["allocated"] - v["unhealthy"]}
        for product, v in sorted(totals.items())
    ]


def node_profile_for(node: Node) -> NodeProfile | None:
    """The operator's profile for the node's pool: of those whose selector its labels match,
    the one with the most selector labels (then the first by name); None when none matches."""
    labels = node.labels or {}
    matching = [p for p in NodeProfile.objects.order_by("name") if p.matches(labels)]
    return max(matching, key=lambda p: len(p.node_selector), default=None)
