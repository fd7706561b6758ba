"""Reads of the compute core that more than one caller needs."""

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import Sum

from billing.models import Wallet
from compute.models import Allocation, Holding, Image
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
    for node in Node.objects.filter(gpu_count__gt=0):  # CPU-only nodes have no GPUs to count
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


@dataclass(frozen=True)
class PendingDrift:
    """A wallet whose pending amounts differ from the sum of its holdings' (compute.metering
    changes both in one transaction, so any drift is a bug or a hand edit)."""

    wallet_id: str
    pending_cash_fen: int
    pending_promo_fen: int
    holdings_cash_fen: int
    holdings_promo_fen: int


def pending_drifts() -> list[PendingDrift]:
    """Every wallet whose pending cash or trial credit is not what its holdings accrued."""
    held = {
        row["tenant_id"]: (row["cash"], row["promo"])
        for row in Holding.objects.values("tenant_id").annotate(
            cash=Sum("pending_cash_fen"), promo=Sum("pending_promo_fen")
        )
    }
    drifts = []
    wallets = Wallet.objects.values_list(
        "id", "tenant_id", "pending_cash_fen", "pending_promo_fen"
    ).order_by("id")
    for wallet_id, tenant_id, cash, promo in wallets.iterator():
        expected = held.get(tenant_id, (0, 0))
        if (cash, promo) != expected:
            drifts.append(PendingDrift(wallet_id, cash, promo, *expected))
    return drifts


def image_locked(image_id: str) -> Image:
    """An image's row, locked to the end of the transaction (a tenant's image being deleted
    while an order names it): the row lock lives with its model (starverse.core.locks)."""
    return Image.objects.select_for_update().get(pk=image_id)
