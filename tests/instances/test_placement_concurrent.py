"""Placement as a set: the candidate query answers what a plain scan of every node's capacity
(the rules read into Python, here) answers, and new orders place in parallel without ever sharing a GPU: each claims the node it
places on, skips a node another order is placing on, and waits for it only when nothing else
fits. A deadlock between two such orders is broken by PostgreSQL and the loser runs again."""

import random
import threading
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from compute import placement
from compute.choices import OfferingKind
from compute.models import Holding, Offering
from compute.queue import waits_ahead
from fleet.models import Gpu, Node, NodeImage, Region
from instances.models import Instance
from starverse.core.db import atomic_retrying
from starverse.core.locks import node_claim_first
from tests.conftest import run_threads
from tests.factories import holding_save, make_user

IMAGE = "starverse/pytorch:2.1"


def _fleet(rng: random.Random) -> None:
    """40 nodes of the three seeded GPU models in two regions, some with their allocatable
    tight or unknown, some holding the image, a few GPUs lost."""
    call_command("seed_catalog", verbosity=0)
    north = Region.objects.get_or_create(name="cn-north", defaults={"display_name": "North"})[0]
    south = Region.objects.get_or_create(name="cn-south", defaults={"display_name": "South"})[0]
    products = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"]
    nodes = Node.objects.bulk_create(
        [
            Node(
                name=f"gpu-{n:03d}",
                region=rng.choice([north, south]),
                gpu_product=products[n % 3],
                gpu_count=8,
                gpu_memory_mb=81559,
                allocatable_cpu_m=rng.choice([None, 190_000, 60_000]),
                allocatable_memory_mib=rng.choice([None, 2_000_000, 600_000]),
                allocatable_ephemeral_mib=rng.choice([None, 6_000_000, 900_000]),
                allocatable_pods=rng.choice([None, 110, 3]),
            )
            for n in range(40)
        ]
    )
    for node in rng.sample(nodes, 10):
        NodeImage.objects.create(node=node, name=IMAGE)
    for node in rng.sample(nodes, 4):
        Gpu.objects.create(
            node=node, index=rng.randrange(8), uuid=f"GPU-{node.name}", lost_at="2026-11-30T00:00Z"
        )


def _chosen_by_scan(offering: Offering, region: str = "", *, image: str = "") -> Any:
    """choose()'s answer from every node's capacity read into Python: the rules the candidate
    query keeps, written out plainly as the reference it is held to."""
    nodes, taken, rooms, regions, warm = placement.capacity_of(
        offering.gpu_model.product, region, image=image
    )
    want = placement.needs(offering)
    best = None
    for node_id, name, count in nodes:
        free = count - len(taken[node_id])
        if offering.kind == OfferingKind.BARE_METAL:
            fits = count == offering.gpu_count and free == count
        else:
            fits = free >= offering.gpu_count
        fits = fits and placement.times(rooms[node_id], want) != 0
        rank = (free, node_id not in warm)
        if fits and (best is None or rank < best[3]):
            best = (node_id, name, count, rank)
    if best is None:
        return None
    node_id, name, count, _rank = best
    return placement.Candidate(
        node_id, name, count, regions[node_id], count - len(taken[node_id]), list(taken[node_id])
    ).placement(offering)


def _fill(rng: random.Random, user: Any, offerings: list[Offering]) -> None:
    """Place a random mix of orders the way an order does, until a few have found no room."""
    misses = 0
    while misses < 6:
        offering = rng.choice(offerings)
        with transaction.atomic():
            found = _chosen_by_scan(offering, image=IMAGE)
            if found is None:
                misses += 1
                continue
            _hold(user, offering, found, "running")


def _hold(user: Any, offering: Offering, found: Any, status: str) -> None:
    """An instance of `offering` holding the GPUs placement found, as an order leaves it."""
    instance = Instance.objects.create(
        tenant_id=user.tenant_id,
        created_by=user,
        offering=offering,
        image_id="pytorch-2.1",
        status=status,
    )
    holding_save(instance, placement=found)


def _answers(offering: Offering, region: str) -> tuple[Any, Any]:
    def plain(found: Any) -> Any:
        return None if found is None else (found[0].id, found[1])

    with transaction.atomic():
        rows = placement.candidates(offering, region, image=IMAGE, limit=1)
        by_query = plain(rows[0].placement(offering) if rows else None)
        by_scan = plain(_chosen_by_scan(offering, region, image=IMAGE))
    return by_query, by_scan


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_candidate_query_chooses_what_the_scan_of_every_node_chooses(db, seed):
    rng = random.Random(seed)
    _fleet(rng)
    user = make_user()
    offerings = list(Offering.objects.filter(active=True).select_related("gpu_model"))
    compared = 0
    for _round in range(3):
        for offering in offerings:
            for region in ("", "cn-north", "cn-south"):
                by_query, by_scan = _answers(offering, region)
                assert by_query == by_scan, (offering.name, region)
                compared += by_query is not None
        _fill(rng, user, offerings)
    assert compared > 30  # most answers placed something: the comparison was not all None


def _hold_claim(offering: Offering, claimed: threading.Event, release: threading.Event) -> Any:
    """Place one instance concurrently and keep the transaction open until `release`."""
    try:
        with transaction.atomic():
            found = placement.choose(offering, concurrent=True)
            claimed.set()
            release.wait(timeout=10)
            return found
    finally:
        connection.close()


def test_a_second_order_skips_the_node_the_first_is_placing_on(transactional_db):
    call_command("seed_catalog", verbosity=0)
    offering = Offering.objects.select_related("gpu_model").get(name="1× H100 80GB SXM")
    for n in range(2):
        Node.objects.create(
            name=f"h-{n}", gpu_product=offering.gpu_model.product, gpu_count=8, gpu_memory_mb=1
        )
    claimed, release = threading.Event(), threading.Event()
    first: list[Any] = []
    holder = threading.Thread(target=lambda: first.append(_hold_claim(offering, claimed, release)))
    holder.start()
    assert claimed.wait(timeout=10)
    try:
        with transaction.atomic():
            second = placement.choose(offering, concurrent=True)
    finally:
        release.set()
        holder.join(timeout=10)
    assert first[0] is not None and second is not None
    assert first[0][0].name != second[0].name  # not queued behind it, and not the same GPUs


def test_an_order_waits_for_the_only_node_with_room_and_reads_it_again(transactional_db):
    call_command("seed_catalog", verbosity=0)
    offering = Offering.objects.select_related("gpu_model").get(name="4× H100 80GB SXM")
    node = Node.objects.create(
        name="h-0", gpu_product=offering.gpu_model.product, gpu_count=8, gpu_memory_mb=1
    )
    user = make_user()

    def place(index: int) -> Any:
        with transaction.atomic():
            found = placement.choose(offering, concurrent=True)
            if found is None:
                return None
            _hold(user, offering, found, "provisioning")
            return sorted(found[1])

    answers = run_threads(3, place)  # room for two of the three
    assert sorted(map(str, answers)) == sorted(map(str, [[0, 1, 2, 3], [4, 5, 6, 7], None]))
    held = list(node.allocations.values_list("gpu_index", flat=True))
    assert sorted(held) == list(range(8))


def test_a_transaction_that_deadlocks_runs_again(transactional_db):
    """Two transactions take two locks in opposite orders: PostgreSQL aborts one of them
    (40P01), and atomic_retrying runs it again, this time after the other committed."""
    barrier = threading.Barrier(2)
    tries = [0, 0]

    def crossing(index: int) -> str:
        first, second = (1, 2) if index == 0 else (2, 1)

        def once() -> str:
            tries[index] += 1
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL deadlock_timeout = '100ms'")
                cursor.execute("SELECT pg_advisory_xact_lock(77, %s)", [first])
                if tries[index] == 1:
                    barrier.wait(timeout=10)  # both hold their first lock
                cursor.execute("SELECT pg_advisory_xact_lock(77, %s)", [second])
            return "done"

        return atomic_retrying(once)

    assert run_threads(2, crossing) == ["done", "done"]
    assert sorted(tries) == [1, 2]  # one of them was aborted once and ran again


def test_claiming_the_first_free_node_takes_exactly_that_one(transactional_db):
    held, release = threading.Event(), threading.Event()

    def other(node_ids: list[str]) -> Any:
        try:
            with transaction.atomic():
                got = node_claim_first(node_ids)
                held.set()
                release.wait(timeout=10)
                return got
        finally:
            connection.close()

    answers: list[Any] = []
    holder = threading.Thread(target=lambda: answers.append(other(["a"])))
    holder.start()
    assert held.wait(timeout=10)
    try:
        with transaction.atomic():
            assert node_claim_first(["a", "b", "c"]) == 1  # "a" is held: "b"
            with transaction.atomic():
                assert node_claim_first(["a", "b"]) == 1  # ours already: "b" again
        # "c" was never claimed by the first call: a third transaction gets it at once
        checked = run_threads(1, lambda _i: _claim_in_own_transaction(["a", "c"]))
        assert checked == [1]
    finally:
        release.set()
        holder.join(timeout=10)
    assert answers == [0]


def _claim_in_own_transaction(node_ids: list[str]) -> Any:
    with transaction.atomic():
        return node_claim_first(node_ids)


def test_a_new_order_queues_behind_a_waiting_one_on_either_way_of_asking(db):
    call_command("seed_catalog", verbosity=0)
    offering = Offering.objects.select_related("gpu_model").get(name="1× H100 80GB SXM")
    Region.objects.get_or_create(name="cn-north", defaults={"display_name": "North"})
    Node.objects.create(
        name="h-0", gpu_product=offering.gpu_model.product, gpu_count=8, gpu_memory_mb=1
    )
    user = make_user()
    product = offering.gpu_model.product

    def asked(region: str) -> tuple[bool, bool]:
        with transaction.atomic():
            by_query = not placement.candidates(offering, region, limit=1, behind_queue=True)
        return waits_ahead(product, region), by_query

    assert asked("") == (False, False)
    waiting = Instance.objects.create(
        tenant_id=user.tenant_id,
        created_by=user,
        offering=offering,
        image_id="pytorch-2.1",
        status="queued",
        region_id="cn-north",
    )
    holding_save(waiting)
    assert asked("") == (True, True)  # any region waits behind it
    assert asked("cn-north") == (True, True)
    assert asked("default") == (False, False)  # another region's order does not hold it up
    Holding.objects.filter(pk=waiting.pk).update(unfunded_since="2026-12-01T00:00Z")
    assert asked("") == (False, False)  # passed over: it cannot pay
