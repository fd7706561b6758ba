"""Placement in the database: which GPUs of which node an instance gets. It runs inside the
caller's transaction, serialised per GPU model by one row lock, and the unique
(node, gpu_index) allocation rows make double-booking impossible even if two placements ever
raced."""

from collections import defaultdict

from instances.choices import NodeState, OfferingKind
from instances.models import Allocation, Gpu, GpuModel, Instance, Node, Offering


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


def choose(offering: Offering) -> tuple[Node, list[int]] | None:
    """The node and GPU indices an instance of this offering gets now, or None. Whole-node
    offerings go only to fully free nodes; GPU offerings best-fit (the fullest node that still
    fits), so whole nodes stay free for whole-node rentals. Must run inside
    transaction.atomic(): it takes the GPU model's lock, which serialises placements of that
    model while other models place in parallel; allocate() must follow in the same transaction."""
    GpuModel.objects.select_for_update().filter(pk=offering.gpu_model_id).values_list("pk").get()
    nodes = list(
        Node.objects.filter(state=NodeState.READY, gpu_product=offering.gpu_model.product).order_by(
            "id"
        )
    )
    free = free_gpus(nodes)
    need = offering.gpu_count
    if offering.kind == OfferingKind.BARE_METAL:
        fits = [n for n in nodes if n.gpu_count == need and len(free[n.id]) == n.gpu_count]
    else:
        fits = [n for n in nodes if len(free[n.id]) >= need]
    if not fits:
        return None
    node = min(fits, key=lambda n: (len(free[n.id]), n.id))
    return node, free[node.id][:need]


def allocate(instance: Instance, node: Node, indices: list[int]) -> None:
    Allocation.objects.bulk_create(
        [Allocation(node=node, gpu_index=i, instance=instance) for i in indices]
    )


def release(instance: Instance) -> None:
    Allocation.objects.filter(instance=instance).delete()
