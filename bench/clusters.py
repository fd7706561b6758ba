"""cluster_placement_1024: placing one 128-node cluster on a 1,024-node fleet (8 GPUs each, 32
leaf switches of 32 nodes) that seeded allocations hold 80 % of, through
compute.placement.choose_nodes and once through the whole clusters.services.cluster_order.
Baselines from the same run: a plain SELECT of the free nodes, and the fewest switches that can
hold 128 of the free nodes (the k largest switches by free nodes: no k switches hold more)."""

import cProfile
import os
import pstats
import random
import statistics
import sys
import time

from bench.common import recreate_database, report, setup_django

NODES = 1024
SWITCHES = 32
GPUS = 8
OCCUPIED = 0.80
CLUSTER = 128
ROUNDS = 5
SEED = 1024
# BENCH_PROFILE=1 prints where the whole cluster_order's time goes (cProfile, to stderr).
PROFILE = os.environ.get("BENCH_PROFILE") == "1"

_FREE_SQL = """
SELECT n.id, n.switch FROM instances_node n
 WHERE n.state = 'ready' AND n.gpu_product = %s
   AND NOT EXISTS (SELECT 1 FROM instances_allocation a WHERE a.node_id = n.id)
"""


def _fleet(product: str) -> None:
    """The nodes, and instances holding 80 % of them: most as whole-node rentals, the rest with
    1, 2 or 4 of their GPUs (a node with any GPU taken is not free for a cluster)."""
    from django.db import connection

    from bench.instances import _users
    from compute.choices import HoldingKind
    from compute.holdings import holding_new
    from compute.models import Allocation, Holding, Offering
    from fleet.models import Node
    from instances.choices import InstanceStatus
    from instances.models import Instance

    nodes = Node.objects.bulk_create(
        [
            Node(
                name=f"gpu-h100-{n:04d}",
                gpu_product=product,
                gpu_count=GPUS,
                gpu_memory_mb=81559,
                rack=f"rack-{n // 2:03d}",
                switch=f"leaf-{n // (NODES // SWITCHES):02d}",
                fabric="ib-0",
            )
            for n in range(NODES)
        ]
    )
    picker = random.Random(SEED)
    busy = picker.sample(nodes, int(NODES * OCCUPIED))
    offerings = {o.gpu_count: o for o in Offering.objects.filter(gpu_model__product=product)}
    whole = Offering.objects.get(kind="bare_metal", gpu_model__product=product)
    (owner,) = _users(1, prefix="busy")
    instances, allocations = [], []
    for index, node in enumerate(busy):
        taken = GPUS if picker.random() < 0.6 else picker.choice((1, 2, 4))
        instance = Instance(
            tenant_id=owner.tenant_id,
            created_by=owner,
            name=f"busy-{index}",
            offering=whole if taken == GPUS else offerings[taken],
            image_id="pytorch-2.1",
            status=InstanceStatus.RUNNING,
            node=node,
        )
        instances.append(instance)
        allocations += [(node, i, instance) for i in range(taken)]
    holdings = [
        holding_new(
            holding_id=inst.id,
            kind=HoldingKind.INSTANCE,
            tenant_id=inst.tenant_id,
            created_by_id=owner.pk,
            offering=inst.offering,
            placement=(node, []),
        )[0]
        for inst, node in zip(instances, busy, strict=True)
    ]
    Holding.objects.bulk_create(holdings)
    Instance.objects.bulk_create(instances)
    Allocation.objects.bulk_create(
        [Allocation(node=node, gpu_index=i, holding_id=inst.id) for node, i, inst in allocations]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _fewest_switches(free_by_switch: dict[str, int], count: int) -> int:
    """The optimum, computed apart from placement.pack: the k largest switches by free nodes
    hold the most any k switches can, so the least k whose sum reaches `count` is optimal."""
    held = 0
    for k, free in enumerate(sorted(free_by_switch.values(), reverse=True), start=1):
        held += free
        if held >= count:
            return k
    raise RuntimeError(f"the fleet has only {held} free nodes for a {count}-node cluster")


def run() -> list[dict]:
    recreate_database()
    setup_django()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test import override_settings

    from bench.instances import _users
    from clusters.selectors import cluster_view
    from clusters.services import cluster_order
    from compute.models import Offering
    from compute.placement import choose_nodes
    from starverse.core import dispatch

    call_command("seed_catalog", verbosity=0)
    offering = Offering.objects.select_related("gpu_model").get(
        kind="bare_metal", gpu_model_id="h100-80g"
    )
    product = offering.gpu_model.product
    _fleet(product)

    selects: list[float] = []
    free_by_switch: dict[str, int] = {}
    for _ in range(ROUNDS):
        began = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(_FREE_SQL, [product])
            rows = cursor.fetchall()
        selects.append(time.perf_counter() - began)
    for _node, switch in rows:
        free_by_switch[switch] = free_by_switch.get(switch, 0) + 1
    optimum = _fewest_switches(free_by_switch, CLUSTER)

    placements, spans = [], set()
    for _ in range(ROUNDS):
        began = time.perf_counter()
        with transaction.atomic():
            gang = choose_nodes(offering, CLUSTER)
        placements.append(time.perf_counter() - began)
        if gang is None:
            raise RuntimeError("choose_nodes found no room for the cluster")
        spans.add(gang.switches_spanned)

    (user,) = _users(1, prefix="clu")
    # A serving process has loaded the task modules (dispatch's registry) before its first
    # order; not measured: a cold import of every app's tasks costs about 0.3 s once.
    dispatch._load_task_modules()
    limits = {"MAX_RUNNING_GPUS": 10**6, "TRIAL_MAX_PREMIUM_GPUS": 10**6, "CLUSTER_MAX_NODES": 128}
    with override_settings(**limits):
        profiler = cProfile.Profile() if PROFILE else None
        began = time.perf_counter()
        if profiler:
            profiler.enable()
        cluster, _created = cluster_order(
            user=user,
            offering_id=offering.id,
            image_id="pytorch-2.1",
            node_count=CLUSTER,
            template="megatron",
        )
        ordered = time.perf_counter() - began
        if profiler:
            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    view = cluster_view(cluster)
    if view.switches_spanned is None:
        raise RuntimeError(f"the cluster was not placed: {view.status}")
    spans.add(view.switches_spanned)

    lines = [
        report(
            "cluster_placement_1024",
            statistics.median(placements) * 1000,
            "ms",
            statistics.median(selects) * 1000,
            f"plain SELECT of the {len(rows)} free nodes (median of {ROUNDS}); "
            f"choose_nodes max {max(placements) * 1000:.1f} ms",
            "value <= 1000",
        ),
        report(
            "cluster_placement_1024_switches",
            max(spans),
            "switches",
            optimum,
            "fewest switches that can hold 128 of the free nodes",
            "value <= baseline + 1",
        ),
        report(
            "cluster_order_128",
            ordered * 1000,
            "ms",
            statistics.median(placements) * 1000,
            "choose_nodes alone, same fleet",
            "value <= 1000",
        ),
    ]
    if max(spans) > optimum + 1:
        raise RuntimeError(f"the cluster spans {max(spans)} switches; the optimum is {optimum}")
    return lines
