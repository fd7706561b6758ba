"""Placement in the database: which GPUs of which node an instance gets. It runs inside the
caller's transaction, serialised per GPU model by one row lock, and the unique
(node, gpu_index) allocation rows make double-booking impossible even if two placements ever
raced."""

from collections import defaultdict
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection

from fleet.choices import NodeState
from fleet.models import Allocation, Gpu, GpuModel, Node, NodeImage
from instances.choices import OfferingKind
from instances.models import Instance, Offering
from starverse.core import kube


class Room(NamedTuple):
    """What a node still has for pods, by its allocatable less what is placed on it: CPU in
    millicores, memory and ephemeral storage in MiB, pod slots. None: no limit known (the
    node's allocatable was never reported)."""

    cpu_m: int | None
    memory_mib: int | None
    ephemeral_mib: int | None
    pods: int | None


class Need(NamedTuple):
    """What one instance asks of a node, in Room's units."""

    cpu_m: int
    memory_mib: int
    ephemeral_mib: int
    pods: int


def needs(offering: Offering) -> Need:
    """What one instance of an offering asks of a node: its pod's CPU and memory requests, its
    local disk on the node's storage, one pod slot."""
    return Need(
        cpu_m=offering.cpu_cores * 1000,
        memory_mib=offering.memory_gb * 1024,
        ephemeral_mib=offering.local_disk_gb * 1024,
        pods=1,
    )


def times(room: Room, need: Need) -> int | None:
    """How many times `need` fits in `room` by CPU, memory, storage and pods (None: no limit)."""
    counts = [
        have // want if want > 0 else None
        for have, want in zip(room, need, strict=True)
        if have is not None
    ]
    limited = [c for c in counts if c is not None]
    return max(min(limited), 0) if limited else None


def shortfall(room: Room, need: Need) -> list[tuple[str, int]]:
    """The resources `need` exceeds `room` by, as (field, amount) pairs."""
    return [
        (field, want - have)
        for field, have, want in zip(Room._fields, room, need, strict=True)
        if have is not None and want > have
    ]


_UNITS = {
    "cpu_m": ("CPU cores", 1000),
    "memory_mib": ("GiB of memory", 1024),
    "ephemeral_mib": ("GiB of local storage", 1024),
    "pods": ("pod slots", 1),
}


def misfit(offering: Offering) -> str | None:
    """Why an offering fits on no node of its GPU model even when the node is empty (by GPUs
    and the node's allocatable), or None when one node fits it or no node of the model is
    known yet. Says which resource is short and by how much, on the node closest to fitting."""
    nodes = list(Node.objects.filter(gpu_product=offering.gpu_model.product).order_by("name"))
    if not nodes:
        return None
    want = needs(offering)
    reasons = []
    for node in nodes:
        short = []
        if node.gpu_count < offering.gpu_count:
            short.append(f"{offering.gpu_count - node.gpu_count} GPUs")
        elif offering.kind == OfferingKind.BARE_METAL and node.gpu_count != offering.gpu_count:
            short.append(f"a whole node of {offering.gpu_count} GPUs (it has {node.gpu_count})")
        room = Room(
            node.allocatable_cpu_m,
            node.allocatable_memory_mib,
            node.allocatable_ephemeral_mib,
            node.allocatable_pods,
        )
        for field, amount in shortfall(room, want):
            label, unit = _UNITS[field]
            have = getattr(room, field)
            short.append(
                f"{amount / unit:g} {label} (needs {getattr(want, field) / unit:g}, "
                f"allocatable {have / unit:g})"
            )
        if not short:
            return None
        reasons.append((len(short), node.name, short))
    _count, name, short = min(reasons)
    return f"Fits on no {offering.gpu_model} node: {name} is short of " + "; ".join(short) + "."


def choose(
    offering: Offering, region: str = "", *, image: str = ""
) -> tuple[Node, list[int]] | None:
    """The node and GPU indices an instance of this offering gets now, or None. A node fits when
    it has the GPUs free and, by its allocatable less what is already placed on it, the CPU,
    memory, ephemeral storage and pod slot the instance's pod asks for, so the kubelet admits
    what the database placed. Whole-node offerings go only to fully free nodes; GPU offerings
    best-fit (the fullest node that still fits), so whole nodes stay free for whole-node
    rentals. Must run inside transaction.atomic(): it takes the GPU model's lock, which
    serialises placements of that model while other models place in parallel; allocate() must
    follow in the same transaction. Only nodes of `region` when one is given ("" = any region,
    so the best fit anywhere). Among nodes that fit equally well (as many GPUs left free),
    one that holds `image` (the container image reference, by the last node sync) is taken
    first: its pod starts without pulling. Reads plain tuples: this is the hot path of every
    order."""
    _model_lock(offering)
    product = offering.gpu_model.product
    nodes, taken, rooms, regions, warm = capacity_of(product, region, image=image)
    need = offering.gpu_count
    want = needs(offering)
    best = None
    for node_id, name, count in nodes:
        free = count - len(taken[node_id])
        if offering.kind == OfferingKind.BARE_METAL:
            fits = count == need and free == count
        else:
            fits = free >= need
        fits = fits and times(rooms[node_id], want) != 0
        rank = (free, node_id not in warm)
        if fits and (best is None or rank < best[3]):
            best = (node_id, name, count, rank)
    if best is None:
        return None
    node_id, name, count, _rank = best
    indices = [i for i in range(count) if i not in taken[node_id]][:need]
    node = Node(
        id=node_id, name=name, gpu_count=count, gpu_product=product, region_id=regions[node_id]
    )
    return node, indices


def _model_lock(offering: Offering) -> None:
    # SQLite has no row locks (its IMMEDIATE transactions already serialise writers).
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {GpuModel._meta.db_table} WHERE id = %s{lock}",  # noqa: S608
            [offering.gpu_model_id],
        )


class Gang(NamedTuple):
    """Where a cluster's ranks go: one whole node each, in rank order, and how many leaf
    switches they span."""

    placements: list[tuple[Node, list[int]]]
    switches_spanned: int


def pack(free: dict[str, list[str]], count: int, *, one_switch: bool) -> list[str] | None:
    """`count` nodes out of `free` (node ids by leaf switch) under as few switches as possible,
    or None. Greedy, and optimal in the number of switches: whole switches are taken largest
    first (no k switches hold more free nodes than the k largest), and the last one is the
    smallest that still covers what is left, so big switches stay whole for the next cluster.
    It does not weigh racks or what lies between two switches (the spine): any two switches
    count alike. With `one_switch`, only a single switch that holds them all will do."""
    groups = sorted(free.items(), key=lambda item: (-len(item[1]), item[0]))
    chosen: list[str] = []
    while len(chosen) < count and groups:
        left = count - len(chosen)
        fitting = [group for group in groups if len(group[1]) >= left]
        if one_switch and not fitting:
            return None
        # the smallest switch that holds the rest, else the largest one there is
        group = fitting[-1] if fitting else groups[0]
        groups.remove(group)
        chosen += group[1][:left]
    return chosen if len(chosen) == count else None


def choose_nodes(
    offering: Offering, count: int, region: str = "", *, prefer: frozenset[str] = frozenset()
) -> Gang | None:
    """Whole free nodes for every rank of a cluster of a whole-node offering, or None (all or
    none: a cluster never holds part of its nodes). Packed under as few leaf switches as
    possible (pack), under the `prefer` switches (those a cluster's other ranks are on, when a
    rank moves) if they have room; an offering with `cluster_one_switch` refuses to span
    switches. Runs in
    the caller's transaction under the same GPU-model lock and the same fit rules as choose(),
    and allocate() follows in that transaction for every rank. All ranks go to one region
    (their pods must reach each other): `region`'s, or with "" the first region, by name,
    where they fit."""
    _model_lock(offering)
    product = offering.gpu_model.product
    nodes, taken, rooms, regions = capacity(product, region)
    want = needs(offering)
    fit = {
        node_id: (name, gpus)
        for node_id, name, gpus in nodes
        if gpus == offering.gpu_count and not taken[node_id] and times(rooms[node_id], want) != 0
    }
    if len(fit) < count:
        return None
    switches = dict(Node.objects.filter(pk__in=list(fit)).values_list("pk", "switch"))
    chosen = None
    for where in sorted({regions[node_id] for node_id in fit}):
        free: dict[str, list[str]] = defaultdict(list)
        for node_id in sorted(fit, key=lambda pk: fit[pk][0]):
            if regions[node_id] == where:
                free[switches[node_id]].append(node_id)
        near = {switch: ids for switch, ids in free.items() if switch in prefer}
        chosen = pack(near, count, one_switch=offering.cluster_one_switch) if near else None
        if chosen is None:
            chosen = pack(free, count, one_switch=offering.cluster_one_switch)
        if chosen is not None:
            break
    if chosen is None:
        return None
    placements = [
        (
            Node(
                id=node_id,
                name=fit[node_id][0],
                gpu_count=fit[node_id][1],
                gpu_product=product,
                region_id=regions[node_id],
            ),
            list(range(fit[node_id][1])),
        )
        for node_id in chosen
    ]
    return Gang(placements, len({switches[node_id] for node_id in chosen}))


_CAPACITY_SQL = """
SELECT 'node', id, name, gpu_count, allocatable_cpu_m, allocatable_memory_mib,
       allocatable_ephemeral_mib, allocatable_pods, region_id,
       EXISTS (SELECT 1 FROM {node_image} ni WHERE ni.node_id = {node}.id AND ni.name = %s)
  FROM {node}
  WHERE state = %s AND gpu_product = %s AND (in_cluster OR %s) AND (%s = '' OR region_id = %s)
UNION ALL
SELECT 'taken', a.node_id, NULL, a.gpu_index, NULL, NULL, NULL, NULL, NULL, NULL
  FROM {allocation} a JOIN {node} n ON n.id = a.node_id WHERE n.gpu_product = %s
UNION ALL
SELECT 'taken', g.node_id, NULL, g."index", NULL, NULL, NULL, NULL, NULL, NULL FROM {gpu} g
  JOIN {node} n ON n.id = g.node_id WHERE n.gpu_product = %s AND g.lost_at IS NOT NULL
UNION ALL
SELECT 'used', held.node_id, NULL, NULL, o.cpu_cores, o.memory_gb, o.local_disk_gb, NULL, NULL,
       NULL
  FROM (SELECT DISTINCT a.node_id, a.instance_id FROM {allocation} a
          JOIN {node} n ON n.id = a.node_id WHERE n.gpu_product = %s) held
  JOIN {instance} i ON i.id = held.instance_id
  JOIN {offering} o ON o.id = i.offering_id
UNION ALL
SELECT 'used', held.node_id, NULL, NULL, o.cpu_cores, o.memory_gb, 0, NULL, NULL, NULL
  FROM (SELECT DISTINCT a.node_id, a.replica_id FROM {allocation} a
          JOIN {node} n ON n.id = a.node_id WHERE n.gpu_product = %s) held
  JOIN {replica} r ON r.id = held.replica_id
  JOIN {endpoint} e ON e.id = r.endpoint_id
  JOIN {offering} o ON o.id = e.offering_id
"""


def capacity(
    product: str, region: str = ""
) -> tuple[list[tuple[str, str, int]], dict[str, set[int]], dict[str, Room], dict[str, str]]:
    """Ready nodes of a product (of one region, or of all with ""), in id order, the GPU
    indices taken (allocated or lost) on each, the room each has left by its allocatable less
    the pods of the instances holding its GPUs, and each node's region: one round trip. When a
    cluster is configured, only nodes it lists: a node that registered itself but that the
    cluster does not run cannot host a pod."""
    nodes, taken, rooms, regions, _warm = capacity_of(product, region)
    return nodes, taken, rooms, regions


def capacity_of(
    product: str, region: str = "", *, image: str = ""
) -> tuple[
    list[tuple[str, str, int]], dict[str, set[int]], dict[str, Room], dict[str, str], set[str]
]:
    """capacity(), and the nodes among them that hold the container image `image` (by any
    of the names their kubelets list for it), in the same round trip."""
    # An inference endpoint's replicas hold GPUs too (their pods' CPU and memory count as
    # well; no local disk). The tables are reached through the allocation's foreign key, not
    # an import: endpoints sits above instances.
    replica: Any = Allocation._meta.get_field("replica").related_model
    endpoint: Any = replica._meta.get_field("endpoint").related_model
    sql = _CAPACITY_SQL.format(
        node_image=NodeImage._meta.db_table,
        node=Node._meta.db_table,
        allocation=Allocation._meta.db_table,
        gpu=Gpu._meta.db_table,
        instance=Instance._meta.db_table,
        offering=Offering._meta.db_table,
        replica=replica._meta.db_table,
        endpoint=endpoint._meta.db_table,
    )
    nodes, taken = [], defaultdict(set)
    allocatable: dict[str, Room] = {}
    regions: dict[str, str] = {}
    warm: set[str] = set()
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    with connection.cursor() as cursor:
        any_node = not settings.KUBECONFIG
        name_held = kube.image_name(image) if image else ""
        cursor.execute(
            sql,
            [
                name_held,
                NodeState.READY,
                product,
                any_node,
                region,
                region,
                product,
                product,
                product,
                product,
            ],
        )
        for row in cursor.fetchall():
            kind, node_id, name, number, cpu, memory, storage, pods, where, held = row
            if kind == "node":
                nodes.append((node_id, name, number))
                allocatable[node_id] = Room(cpu, memory, storage, pods)
                regions[node_id] = where
                if held:
                    warm.add(node_id)
            elif kind == "taken":
                taken[node_id].add(number)
            else:
                held = used[node_id]
                held[0] += cpu * 1000
                held[1] += memory * 1024
                held[2] += storage * 1024
                held[3] += 1
    nodes.sort()
    rooms = {
        node_id: Room(
            *(
                None if have is None else have - spent
                for have, spent in zip(room, used[node_id], strict=True)
            )
        )
        for node_id, room in allocatable.items()
    }
    return nodes, taken, rooms, regions, warm


def _less(room: Room, spent: list[int]) -> Room:
    return Room(*(None if have is None else have - s for have, s in zip(room, spent, strict=True)))


def allocate(instance: Instance, node: Node, indices: list[int]) -> None:
    Allocation.objects.bulk_create(
        [Allocation(node=node, gpu_index=i, instance=instance) for i in indices]
    )


def release(instance: Instance) -> None:
    Allocation.objects.filter(instance=instance).delete()
