from collections import defaultdict
from datetime import timedelta
from typing import Any

from django.utils import timezone

from fleet.models import Gpu, GpuSample
from instances.choices import OfferingKind
from instances.models import Offering
from instances.placement import capacity
from starverse.core.db import raw_datetime


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


LIST_SQL = """
SELECT i.id, i.name, i.status, i.offering_id, i.image_id, i.billing, i.created_at,
       i.started_at, i.queued_at, i.ssh_port, i.jupyter_port, i.jupyter_token, i.cost_fen,
       i.node_id, i.error_message, i.paid_until, i.auto_renew, i.auto_recover,
       o.gpu_model_id, o.gpu_count, o.price_per_hour_fen, m.product, n.name,
       COUNT(*) OVER () AS total
FROM instances_instance i
JOIN instances_offering o ON o.id = i.offering_id
JOIN instances_gpumodel m ON m.id = o.gpu_model_id
LEFT JOIN instances_node n ON n.id = i.node_id
WHERE i.tenant_id = %s {status}
ORDER BY i.created_at DESC, i.id
LIMIT %s OFFSET %s
"""
_ROW = (
    "id",
    "name",
    "status",
    "offering_id",
    "image_id",
    "billing",
    "created_at",
    "started_at",
    "queued_at",
    "ssh_port",
    "jupyter_port",
    "jupyter_token",
    "cost_fen",
    "node_id",
    "error_message",
    "paid_until",
    "auto_renew",
    "auto_recover",
    "gpu_model_id",
    "gpu_count",
    "price_per_hour_fen",
    "product",
    "node_name",
    "total",
)
_TIMES = ("created_at", "started_at", "queued_at", "paid_until")


def instance_page(
    tenant_id: str, *, status: str | None, limit: int, offset: int
) -> tuple[int | None, list[Any]]:
    """One page of a tenant's instances, newest first, with the total count, in one query and
    the attached disks in a second: the instance list is the API's hottest read, and building
    these queries through the ORM cost more than running them. Rows are shaped like Instance
    for InstanceOutput (offering, node and attached_disks included). The count is None when
    the page is past the end."""
    from types import SimpleNamespace

    from django.db import connection

    params: list[Any] = [tenant_id, *([status] if status else []), limit, offset]
    sql = LIST_SQL.format(status="AND i.status = %s" if status else "")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = [dict(zip(_ROW, row, strict=True)) for row in cursor.fetchall()]
        ids = [row["id"] for row in rows]
        disks: dict[str, list[Any]] = defaultdict(list)
        if ids:
            marks = ", ".join(["%s"] * len(ids))
            cursor.execute(
                "SELECT instance_id, id FROM instances_disk "  # noqa: S608 - placeholders only
                f"WHERE instance_id IN ({marks}) ORDER BY name",
                ids,
            )
            for instance_id, disk_id in cursor.fetchall():
                disks[instance_id].append(SimpleNamespace(id=disk_id))
    items = []
    for row in rows:
        for key in _TIMES:
            row[key] = raw_datetime(row[key])
        row["auto_renew"], row["auto_recover"] = bool(row["auto_renew"]), bool(row["auto_recover"])
        gpu_model = SimpleNamespace(id=row.pop("gpu_model_id"), product=row.pop("product"))
        row["offering"] = SimpleNamespace(
            gpu_model=gpu_model,
            gpu_model_id=gpu_model.id,
            gpu_count=row.pop("gpu_count"),
            price_per_hour_fen=row.pop("price_per_hour_fen"),
        )
        row["node"] = SimpleNamespace(name=row.pop("node_name"))
        row["attached_disks"] = disks.get(row["id"], [])
        items.append(SimpleNamespace(**row))
    total = rows[0]["total"] if rows else None
    return total, items
