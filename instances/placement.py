"""Placement in the database: which GPUs of which node an instance gets. It runs inside the
caller's transaction, serialised per GPU model by one row lock, and the unique
(node, gpu_index) allocation rows make double-booking impossible even if two placements ever
raced."""

from collections import defaultdict

from django.conf import settings
from django.db import connection

from fleet.choices import NodeState
from fleet.models import Allocation, Gpu, GpuModel, Node
from instances.choices import OfferingKind
from instances.models import Instance, Offering


def choose(offering: Offering) -> tuple[Node, list[int]] | None:
    """The node and GPU indices an instance of this offering gets now, or None. Whole-node
    offerings go only to fully free nodes; GPU offerings best-fit (the fullest node that still
    fits), so whole nodes stay free for whole-node rentals. Must run inside
    transaction.atomic(): it takes the GPU model's lock, which serialises placements of that
    model while other models place in parallel; allocate() must follow in the same transaction.
    Reads plain tuples: this is the hot path of every order."""
    # SQLite has no row locks (its IMMEDIATE transactions already serialise writers).
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {GpuModel._meta.db_table} WHERE id = %s{lock}",  # noqa: S608
            [offering.gpu_model_id],
        )
    product = offering.gpu_model.product
    nodes, taken = capacity(product)
    need = offering.gpu_count
    best = None
    for node_id, name, count in nodes:
        free = count - len(taken[node_id])
        if offering.kind == OfferingKind.BARE_METAL:
            fits = count == need and free == count
        else:
            fits = free >= need
        if fits and (best is None or free < best[3]):
            best = (node_id, name, count, free)
    if best is None:
        return None
    node_id, name, count, _free = best
    indices = [i for i in range(count) if i not in taken[node_id]][:need]
    return Node(id=node_id, name=name, gpu_count=count, gpu_product=product), indices


_CAPACITY_SQL = """
SELECT 'node', id, name, gpu_count FROM {node}
  WHERE state = %s AND gpu_product = %s AND (in_cluster OR %s)
UNION ALL
SELECT 'taken', a.node_id, NULL, a.gpu_index FROM {allocation} a
  JOIN {node} n ON n.id = a.node_id WHERE n.gpu_product = %s
UNION ALL
SELECT 'taken', g.node_id, NULL, g."index" FROM {gpu} g
  JOIN {node} n ON n.id = g.node_id WHERE n.gpu_product = %s AND g.lost_at IS NOT NULL
"""


def capacity(product: str) -> tuple[list[tuple[str, str, int]], dict[str, set[int]]]:
    """Ready nodes of a product, in id order, and the GPU indices taken (allocated or lost)
    on each: one round trip. When a cluster is configured, only nodes it lists: a node that
    registered itself but that the cluster does not run cannot host a pod."""
    sql = _CAPACITY_SQL.format(
        node=Node._meta.db_table, allocation=Allocation._meta.db_table, gpu=Gpu._meta.db_table
    )
    nodes, taken = [], defaultdict(set)
    with connection.cursor() as cursor:
        any_node = not settings.KUBECONFIG
        cursor.execute(sql, [NodeState.READY, product, any_node, product, product])
        for kind, node_id, name, number in cursor.fetchall():
            if kind == "node":
                nodes.append((node_id, name, number))
            else:
                taken[node_id].add(number)
    nodes.sort()
    return nodes, taken


def allocate(instance: Instance, node: Node, indices: list[int]) -> None:
    Allocation.objects.bulk_create(
        [Allocation(node=node, gpu_index=i, instance=instance) for i in indices]
    )


def release(instance: Instance) -> None:
    Allocation.objects.filter(instance=instance).delete()
