"""Placement in the database: which GPUs of which node a holding gets (an instance, every rank
of a cluster at once, an endpoint's replica). It runs inside the caller's transaction under
its GPU model's placement lock (exclusive, or shared among new orders, which then claim a node
each: see choose()), and the unique (node, gpu_index) allocation rows make double-booking
impossible even if two placements ever raced. What a node has left is its allocatable less
what the holdings placed on it ask for (compute.models.Holding, by their offerings): those
holding its GPUs and those in no-GPU mode running there without any (choose_cpu_only)."""

import functools
from collections import defaultdict
from typing import NamedTuple

from django.conf import settings
from django.db import connection

from compute import queue
from compute.choices import HoldingKind, OfferingKind
from compute.models import Allocation, Offering
from fleet.choices import NodeState
from fleet.models import Gpu, GpuModel, Node, NodeImage
from starverse.core import kube
from starverse.core.db import execute_prepared
from starverse.core.locks import gpu_model_placement_lock, node_claim, node_claim_first


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


def shape(
    offering: Offering, region: str = "", *, nodes: int = 1, gang: bool = False, spot: bool = False
) -> queue.Shape:
    """An order of `offering` (kept to `region`, "" = any; a `gang` of `nodes` ranks, each a
    whole node: choose_nodes; a `spot` one) as the queue's drain compares orders
    (compute.queue.Shape)."""
    return queue.Shape(
        region=region,
        whole=gang or offering.kind == OfferingKind.BARE_METAL,
        nodes=nodes,
        gpus=offering.gpu_count,
        need=tuple(needs(offering)),
        spot=spot,
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
    offering: Offering,
    region: str = "",
    *,
    image: str = "",
    concurrent: bool = False,
    spot: bool = False,
    reserved: queue.Reserved | None = None,
) -> tuple[Node, list[int]] | None:
    """The node and GPU indices an instance of this offering gets now, or None. A node fits when
    it has the GPUs free and, by its allocatable less what is already placed on it, the CPU,
    memory, ephemeral storage and pod slot the instance's pod asks for, so the kubelet admits
    what the database placed. Whole-node offerings go only to fully free nodes; GPU offerings
    best-fit (the fullest node that still fits), so whole nodes stay free for whole-node
    rentals. Must run inside transaction.atomic(), and the holding's placement must follow in
    the same transaction (compute.holdings.holding_place). Only nodes of `region` when one is
    given ("" = any region, so the best fit anywhere). Among nodes that fit equally well (as
    many GPUs left free), one that holds `image` (the container image reference, by the last
    node sync) is taken first: its pod starts without pulling.

    Locks. By default the GPU model's placement lock is taken exclusively, which serialises every
    placement of that model (the queue's drain, starts, clusters, endpoint replicas) while
    other models place in parallel. A new order (`concurrent`) takes the model's lock shared
    instead, so that new orders for one model place in parallel with each other and never
    with an exclusive placement, and claims the node it takes with a transaction-scoped
    advisory lock: the best-fitting node no other order is placing on right now, its GPUs
    read again once it is held. Two orders therefore never pick the same GPUs, and an order
    skips a node another is placing on rather than queueing behind it (so under a burst the
    second-fullest node may be taken before the fullest; packing stays best-fit otherwise).
    A new order also takes nothing while an earlier order waits for the same GPUs (first come,
    first served: compute.queue; a `spot` order takes nothing while any paying order waits),
    read under the lock in the same statement. The queue's drain passes the GPUs `reserved` for
    the orders ahead (compute.queue.reserve): an order behind them takes none of them; a spot
    order's callers add the GPUs kept for paying orders (compute.preemption.headroom)."""
    if not concurrent:
        gpu_model_placement_lock(offering.gpu_model_id)
        found = candidates(offering, region, image=image, limit=1, reserved=reserved)
        return found[0].placement(offering) if found else None
    gpu_model_placement_lock(offering.gpu_model_id, shared=True)
    return _choose_claiming(offering, region, image=image, spot=spot, reserved=reserved)


def _choose_claiming(
    offering: Offering, region: str, *, image: str, spot: bool, reserved: queue.Reserved | None
) -> tuple[Node, list[int]] | None:
    """choose() for a new order, under the model's shared lock: the best-fitting node no other
    order is claiming, claimed (see choose())."""
    tried: list[str] = []
    busy: list[str] = []
    while True:
        found = candidates(
            offering,
            region,
            image=image,
            limit=CANDIDATES,
            skip=tried,
            behind_queue=not tried,
            spot=spot,
            reserved=reserved,
        )
        if not found:
            break
        ids = [candidate.id for candidate in found]
        tried += ids
        while ids:
            index = node_claim_first(ids)
            if index is None:
                busy += ids
                break
            busy += ids[:index]
            fresh = candidates(
                offering, region, image=image, limit=1, only=ids[index], reserved=reserved
            )
            if fresh:
                return fresh[0].placement(offering)
            ids = ids[index + 1 :]  # taken meanwhile: on to the next that fits
    # Every node that fits is being placed on by other orders (or filled meanwhile): they may
    # still have room once those commit. Wait for them, in id order (a deadlock with another
    # order doing the same is retried by the caller's transaction: instance_order).
    for node_id in sorted(busy):
        node_claim(node_id)
        fresh = candidates(offering, region, image=image, limit=1, only=node_id, reserved=reserved)
        if fresh:
            return fresh[0].placement(offering)
    return None


# How many best-fitting nodes one read returns for a concurrent order to try claiming: about
# as many orders as place at the same moment, few enough to stay one small read.
CANDIDATES = 16


class Candidate(NamedTuple):
    """A node an instance fits on now, as candidates() reads it."""

    id: str
    name: str
    gpu_count: int
    region_id: str
    free: int
    taken: list[int]

    def placement(self, offering: Offering) -> tuple[Node, list[int]]:
        """The node and the lowest free GPU indices an instance of `offering` gets on it."""
        held = set(self.taken)
        indices = [i for i in range(self.gpu_count) if i not in held][: offering.gpu_count]
        node = Node(
            id=self.id,
            name=self.name,
            gpu_count=self.gpu_count,
            gpu_product=offering.gpu_model.product,
            region_id=self.region_id,
        )
        return node, indices


# What is placed on node n, as both candidate queries read it (u): the CPU, memory and local
# storage its pods ask for and their count, a pod being a holding with GPUs on the node or one
# in no-GPU mode placed on it (Holding.cpu_node).
_PLACED_SQL = """CROSS JOIN LATERAL (
   SELECT COALESCE(SUM(o.cpu_cores), 0) * 1000 AS cpu_m,
          COALESCE(SUM(o.memory_gb), 0) * 1024 AS memory_mib,
          COALESCE(SUM(CASE WHEN h.kind = %(replica)s THEN 0 ELSE o.local_disk_gb END), 0)
            * 1024 AS ephemeral_mib,
          COUNT(h.id) AS pods
     FROM (SELECT holding_id FROM {allocation} WHERE node_id = n.id
           UNION SELECT id FROM {holding} WHERE cpu_node_id = n.id) held
     JOIN {holding} h ON h.id = held.holding_id
     JOIN {offering} o ON o.id = h.offering_id
 ) u"""


# One round trip, set-based: per node of the product (ready, in the cluster, in the region),
# the GPU indices taken (allocated or lost) and what the pods holding its GPUs ask for (their
# holdings' offerings; an endpoint replica takes no local disk), then only the nodes the
# instance fits on, best fit first (fewest GPUs left free, then a node holding the image, then
# by id). Each node's figures are lookups into its own rows (LATERAL), index lookups once the
# tables' statistics know them as more than a page or two (statistics taken while the
# allocations were nearly empty plan them as scans until the next analyze: see
# docs/operator-guide.md "Benchmarks", order_throughput); the answer grows with the candidates
# asked for.
_CANDIDATES_SQL = """
SELECT n.id, n.name, n.gpu_count, n.region_id, n.gpu_count - t.count AS free, t.indices
  FROM {node} n
 CROSS JOIN LATERAL (
   SELECT COUNT(*) AS count, COALESCE(ARRAY_AGG(gpu_index ORDER BY gpu_index), '{{}}') AS indices
     FROM (SELECT gpu_index FROM {allocation} WHERE node_id = n.id
           UNION
           SELECT "index" FROM {gpu} WHERE node_id = n.id AND lost_at IS NOT NULL) gpus
 ) t
 CROSS JOIN LATERAL (
   SELECT COALESCE((%(kept)s::int[])[array_position(%(kept_on)s::text[], n.id::text)], 0)
            AS kept
 ) r
 {placed}
 WHERE n.state = %(state)s AND n.gpu_product = %(product)s AND (n.in_cluster OR %(any_node)s)
   AND (%(region)s = '' OR n.region_id = %(region)s)
   AND (%(only)s = '' OR n.id = %(only)s) AND NOT (n.id = ANY(%(skip)s))
   AND (CASE WHEN %(whole)s THEN n.gpu_count = %(gpus)s AND t.count = 0 AND r.kept = 0
             ELSE n.gpu_count - t.count - r.kept >= %(gpus)s END)
   AND (%(cpu_m)s = 0 OR n.allocatable_cpu_m IS NULL
        OR n.allocatable_cpu_m - u.cpu_m >= %(cpu_m)s)
   AND (%(memory_mib)s = 0 OR n.allocatable_memory_mib IS NULL
        OR n.allocatable_memory_mib - u.memory_mib >= %(memory_mib)s)
   AND (%(ephemeral_mib)s = 0 OR n.allocatable_ephemeral_mib IS NULL
        OR n.allocatable_ephemeral_mib - u.ephemeral_mib >= %(ephemeral_mib)s)
   AND (n.allocatable_pods IS NULL OR n.allocatable_pods - u.pods >= 1)
   AND NOT (%(behind_queue)s AND EXISTS ({queue_ahead}))
 ORDER BY free,
          NOT EXISTS (SELECT 1 FROM {node_image} ni
                       WHERE ni.node_id = n.id AND ni.name = %(image)s),
          n.id
 LIMIT %(limit)s
"""


def candidates(
    offering: Offering,
    region: str = "",
    *,
    image: str = "",
    limit: int = 1,
    only: str = "",
    skip: list[str] | None = None,
    behind_queue: bool = False,
    spot: bool = False,
    reserved: queue.Reserved | None = None,
) -> list[Candidate]:
    """The nodes an instance of `offering` fits on now, best fit first (see choose()), at most
    `limit`; only the node `only` when given, never those in `skip`; with `behind_queue`, none
    while an earlier order waits for these GPUs (compute.queue; for a `spot` order, while any
    paying order does); the GPUs `reserved` (node id → count) are not free to it. The caller
    holds the GPU model's lock (and, placing concurrently, its claim on `only`)."""
    want = needs(offering)
    kept_on = sorted(reserved or {})
    with connection.cursor() as cursor:
        execute_prepared(
            cursor,
            "sv_candidates",
            _candidates_sql(),
            {
                "state": NodeState.READY,
                "product": offering.gpu_model.product,
                "any_node": not settings.KUBECONFIG,
                "region": region,
                "only": only,
                "skip": list(skip or []),
                "whole": offering.kind == OfferingKind.BARE_METAL,
                "gpus": offering.gpu_count,
                "cpu_m": want.cpu_m,
                "memory_mib": want.memory_mib,
                "ephemeral_mib": want.ephemeral_mib,
                "image": kube.image_name(image) if image else "",
                "limit": limit,
                "behind_queue": behind_queue,
                "replica": HoldingKind.REPLICA.value,
                "before": None,
                "spot": spot,
                "kept_on": kept_on,
                "kept": [(reserved or {})[node_id] for node_id in kept_on],
            },
        )
        return [Candidate(*row) for row in cursor.fetchall()]


@functools.cache
def _candidates_sql() -> str:
    """_CANDIDATES_SQL with its tables, written once a process (every order reads it twice)."""
    return _CANDIDATES_SQL.format(
        **_tables(), queue_ahead=queue.ahead_exists_sql(), placed=_placed_sql()
    )


@functools.cache
def _placed_sql() -> str:
    return _PLACED_SQL.format(**_tables())


def _tables() -> dict[str, str]:
    return {
        **queue.tables(),
        "node_image": NodeImage._meta.db_table,
        "node": Node._meta.db_table,
        "allocation": Allocation._meta.db_table,
        "gpu": Gpu._meta.db_table,
    }


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
    offering: Offering,
    count: int,
    region: str = "",
    *,
    prefer: frozenset[str] = frozenset(),
    avoid: frozenset[str] = frozenset(),
    behind_queue: bool = False,
    spot: bool = False,
    reserved: queue.Reserved | None = None,
) -> Gang | None:
    """Whole free nodes for every rank of a cluster of a whole-node offering, or None (all or
    none: a cluster never holds part of its nodes). Packed under as few leaf switches as
    possible (pack), under the `prefer` switches (those a cluster's other ranks are on, when a
    rank moves) if they have room, and never on the `avoid` nodes (ids: those a moving rank
    leaves); an offering with `cluster_one_switch` refuses to span switches. Runs in
    the caller's transaction under the same GPU-model lock and the same fit rules as choose(),
    and each rank's holding is placed in that transaction (compute.holdings.holding_place).
    All ranks go to one region (their pods must reach each other): `region`'s, or with "" the
    first region, by name, where they fit. With `behind_queue` (a new cluster), none while an
    earlier order waits for these GPUs, read under the lock as choose() reads it; never a node
    with GPUs `reserved` for an order ahead (compute.queue.reserve)."""
    gpu_model_placement_lock(offering.gpu_model_id)
    product = offering.gpu_model.product
    if behind_queue and queue.waits_ahead(product, region, spot=spot):
        return None
    nodes, taken, rooms, regions = capacity(product, region)
    want = needs(offering)
    fit = {
        node_id: (name, gpus)
        for node_id, name, gpus in nodes
        if gpus == offering.gpu_count
        and not taken[node_id]
        and node_id not in avoid
        and not (reserved or {}).get(node_id)
        and times(rooms[node_id], want) != 0
    }
    if len(fit) < count:
        return None
    switches = dict(Node.objects.filter(pk__in=list(fit)).values_list("pk", "switch"))
    chosen = _gang_pack(
        fit, switches, regions, count, prefer=prefer, one_switch=offering.cluster_one_switch
    )
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


def _gang_pack(
    fit: dict[str, tuple[str, int]],
    switches: dict[str, str],
    regions: dict[str, str],
    count: int,
    *,
    prefer: frozenset[str],
    one_switch: bool,
) -> list[str] | None:
    """choose_nodes()'s `count` node ids out of the fitting nodes (id → (name, GPUs)), all in
    the first region by name where they pack (pack), under the `prefer` switches when those
    have room; None when no region can hold them all. Nodes go in name order within their
    switch, so the same fleet packs the same way every time."""
    for where in sorted({regions[node_id] for node_id in fit}):
        free: dict[str, list[str]] = defaultdict(list)
        for node_id in sorted(fit, key=lambda pk: fit[pk][0]):
            if regions[node_id] == where:
                free[switches[node_id]].append(node_id)
        near = {switch: ids for switch, ids in free.items() if switch in prefer}
        chosen = pack(near, count, one_switch=one_switch) if near else None
        if chosen is None:
            chosen = pack(free, count, one_switch=one_switch)
        if chosen is not None:
            return chosen
    return None


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
SELECT 'used', held.node_id, NULL, NULL, o.cpu_cores, o.memory_gb,
       CASE WHEN h.kind = %s THEN 0 ELSE o.local_disk_gb END, NULL, NULL, NULL
  FROM (SELECT a.node_id, a.holding_id FROM {allocation} a
          JOIN {node} n ON n.id = a.node_id WHERE n.gpu_product = %s
        UNION
        SELECT c.cpu_node_id, c.id FROM {holding} c
          JOIN {node} n ON n.id = c.cpu_node_id WHERE n.gpu_product = %s) held
  JOIN {holding} h ON h.id = held.holding_id
  JOIN {offering} o ON o.id = h.offering_id
"""


def capacity(
    product: str, region: str = ""
) -> tuple[list[tuple[str, str, int]], dict[str, set[int]], dict[str, Room], dict[str, str]]:
    """Ready nodes of a product (of one region, or of all with ""), in id order, the GPU
    indices taken (allocated or lost) on each, the room each has left by its allocatable less
    the pods of the holdings placed on it, and each node's region: one round trip. When a
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
    sql = _CAPACITY_SQL.format(**_tables())
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
                HoldingKind.REPLICA.value,
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
    rooms = {node_id: _less(room, used[node_id]) for node_id, room in allocatable.items()}
    return nodes, taken, rooms, regions, warm


def _less(room: Room, spent: list[int]) -> Room:
    """What is left of a node's allocatable room once `spent` is placed (unknown stays
    unknown)."""
    return Room(*(None if have is None else have - s for have, s in zip(room, spent, strict=True)))


# No-GPU mode: the ready nodes of a region (GPU nodes of any model, and CPU-only ones) with
# room for the pod's CPU, memory, local storage and a pod slot by their allocatable less what
# is placed on them (as _CANDIDATES_SQL counts it), CPU-only nodes first, then the GPU nodes
# with the fewest GPUs free (a node whose GPUs are all held has CPU nobody else can use; one
# with free GPUs keeps its room for their renters), then by id.
_CPU_ONLY_SQL = """
SELECT n.id, n.name, n.region_id, n.gpu_product, n.gpu_count
  FROM {node} n
 CROSS JOIN LATERAL (
   SELECT COUNT(*) AS count FROM {allocation} WHERE node_id = n.id
 ) t
 {placed}
 WHERE n.state = %(state)s AND (n.in_cluster OR %(any_node)s)
   AND (%(region)s = '' OR n.region_id = %(region)s)
   AND (n.allocatable_cpu_m IS NULL OR n.allocatable_cpu_m - u.cpu_m >= %(cpu_m)s)
   AND (n.allocatable_memory_mib IS NULL
        OR n.allocatable_memory_mib - u.memory_mib >= %(memory_mib)s)
   AND (n.allocatable_ephemeral_mib IS NULL
        OR n.allocatable_ephemeral_mib - u.ephemeral_mib >= %(ephemeral_mib)s)
   AND (n.allocatable_pods IS NULL OR n.allocatable_pods - u.pods >= 1)
 ORDER BY n.gpu_count > 0, n.gpu_count - t.count, n.id
 LIMIT 1
"""


def choose_cpu_only(offering: Offering, region: str = "") -> Node | None:
    """The node an instance of `offering` runs on in no-GPU mode (its pod without GPUs), or
    None when no node of `region` ("" = any) has room for its CPU, memory, local storage and
    pod: a CPU-only node first, else the GPU node with the fewest GPUs free. Must run inside
    transaction.atomic(), and the holding's placement must follow in the same transaction
    (compute.holdings.holding_place_cpu_only).

    Locks. A GPU placement reads a node's room under its GPU model's placement lock (and a new
    order under its claim on the node); so this takes, in one fixed order, the placement lock
    of every GPU model exclusively, and that of the CPU-only nodes (the model id ""), then its
    claim on the node: no placement of any kind reads the node's room meanwhile. No-GPU starts
    are rare and quick; they hold up the placements of every model for one statement."""
    for model_id in sorted(["", *GpuModel.objects.values_list("pk", flat=True)]):
        gpu_model_placement_lock(model_id)
    want = needs(offering)
    sql = _CPU_ONLY_SQL.format(**_tables(), placed=_placed_sql())
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "state": NodeState.READY,
                "any_node": not settings.KUBECONFIG,
                "region": region,
                "replica": HoldingKind.REPLICA.value,
                "cpu_m": want.cpu_m,
                "memory_mib": want.memory_mib,
                "ephemeral_mib": want.ephemeral_mib,
            },
        )
        row = cursor.fetchone()
    if row is None:
        return None
    node_id, name, region_id, product, gpus = row
    node_claim(node_id)
    return Node(id=node_id, name=name, region_id=region_id, gpu_product=product, gpu_count=gpus)


_LOADS_SQL = """
SELECT n.id, n.gpu_count,
       (SELECT COUNT(*) FROM {allocation} a WHERE a.node_id = n.id)
         + (SELECT COUNT(*) FROM {gpu} g WHERE g.node_id = n.id AND g.lost_at IS NOT NULL),
       (SELECT COUNT(*) FROM {allocation} a JOIN {holding} h ON h.id = a.holding_id
         WHERE a.node_id = n.id AND h.billing = 'spot')
  FROM {node} n
 WHERE n.state = %s AND n.gpu_product = %s AND (n.in_cluster OR %s)
   AND (%s = '' OR n.region_id = %s)
 ORDER BY n.id
"""


def loads(product: str, region: str = "") -> list[queue.Load]:
    """The ready nodes of a product (of one region, or of all with "") as backfilling reads
    them (compute.queue.Load): GPUs, free ones, and those that stay held (taken, less those of
    spot holdings: a paying order takes them back). One round trip, under the caller's
    placement lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            _LOADS_SQL.format(**_tables()),
            [NodeState.READY, product, not settings.KUBECONFIG, region, region],
        )
        return [
            queue.Load(node_id, gpus, gpus - taken, taken - leaving)
            for node_id, gpus, taken, leaving in cursor.fetchall()
        ]
