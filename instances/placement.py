"""Placement in the database: which GPUs of which node an instance gets. It runs inside the
caller's transaction with the candidate nodes locked in a fixed order, and the unique
(node, gpu_index) allocation rows make double-booking impossible even under concurrent orders."""

from collections import defaultdict

from instances.choices import NodeState, OfferingKind
from instances.models import Allocation, Gpu, Instance, Node


def free_gpus(nodes: list[Node]) -> dict[str, list[int]]:
    """Free, healthy GPU indices per node."""
    taken: dict[str, set[int]] = defaultdict(set)
    for node_id, index in Allocation.objects.filter(node__in=nodes).values_list(
        "node_id", "gpu_index"
    ):
        taken[node_id].add(index)
    for node_id, index in Gpu.objects.filter(node__in=nodes, lost_at__isnull=False).values_list(
        "node_id", "index"
    ):
        taken[node_id].add(index)
    return {
        node.id: [i for i in range(node.gpu_count) if i not in taken[node.id]] for node in nodes
    }


def place(instance: Instance) -> Node | None:
    """Allocate GPUs for the instance, or None when no node fits now. Whole-node offerings go
    only to fully free nodes; GPU offerings best-fit (the fullest node that still fits), so
    whole nodes stay free for whole-node rentals. Must run inside transaction.atomic()."""
    offering = instance.offering
    nodes = list(
        Node.objects.select_for_update()
        .filter(state=NodeState.READY, gpu_product=offering.gpu_model.product)
        .order_by("id")
    )
    free = free_gpus(nodes)
    need = offering.gpu_count
    if offering.kind == OfferingKind.BARE_METAL:
        fits = [n for n in nodes if n.gpu_count == need and len(free[n.id]) == n.gpu_count]
        chosen = fits[0] if fits else None
    else:
        fits = [n for n in nodes if len(free[n.id]) >= need]
        chosen = min(fits, key=lambda n: (len(free[n.id]), n.id)) if fits else None
    if chosen is None:
        return None
    Allocation.objects.bulk_create(
        [Allocation(node=chosen, gpu_index=i, instance=instance) for i in free[chosen.id][:need]]
    )
    return chosen


def release(instance: Instance) -> None:
    Allocation.objects.filter(instance=instance).delete()
