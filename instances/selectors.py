from collections import defaultdict
from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from instances.choices import NodeState, OfferingKind
from instances.models import Allocation, Gpu, GpuSample, Node, Offering
from instances.placement import capacity


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


def availability(offerings: list[Offering]) -> dict[str, int]:
    """How many of each offering could be placed right now on free, healthy capacity (each
    counted on its own, as if it were the only order); read the way placement reads it."""
    per_product = {
        product: capacity(product) for product in {o.gpu_model.product for o in offerings}
    }
    result = {}
    for offering in offerings:
        nodes, taken = per_product[offering.gpu_model.product]
        free = [(count, count - len(taken[node_id])) for node_id, _name, count in nodes]
        if offering.kind == OfferingKind.BARE_METAL:
            result[offering.id] = sum(
                1 for count, left in free if count == offering.gpu_count and left == count
            )
        else:
            result[offering.id] = sum(left // offering.gpu_count for _count, left in free)
    return result


def instance_metrics(instance: Any, *, window: timedelta = timedelta(hours=1)) -> list[dict]:
    """Per-GPU series of the instance's GPUs over the last hour of its current placement."""
    if instance.node_id is None:
        return []
    indices = sorted(instance.allocations.values_list("gpu_index", flat=True))
    gpus = {g.index: g for g in Gpu.objects.filter(node_id=instance.node_id, index__in=indices)}
    since = max(timezone.now() - window, instance.started_at or timezone.now() - window)
    samples = GpuSample.objects.filter(gpu__in=gpus.values(), at__gte=since).order_by("at")
    series: dict[int, list[dict]] = defaultdict(list)
    for sample in samples.values("gpu_id", "at", "util", "mem_used_mb", "temp_c", "power_w"):
        series[sample["gpu_id"]].append(
            {k: sample[k] for k in ("at", "util", "mem_used_mb", "temp_c", "power_w")}
        )
    return [
        {"gpu": index, "uuid": gpus[index].uuid, "samples": series.get(gpus[index].pk, [])}
        for index in indices
        if index in gpus
    ]
