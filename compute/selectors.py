"""Reads of the compute core that more than one caller needs."""

from collections import defaultdict
from typing import Any

from compute.models import Allocation
from fleet.choices import NodeState
from fleet.models import Gpu, Node


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
