"""Where a paying order takes spot GPUs back, on PostgreSQL and the emulated fleet's two 8×H100
nodes (compute.preemption.plan): where placement would put it were those GPUs free, the node
whose GPUs paying rentals hold most (best fit), so paying rentals pack as on free GPUs and
another node stays free of them for a whole-node or 8-GPU order; there the fewest holdings,
the youngest first; among nodes equally packed, the fewest holdings, then the youngest."""

from datetime import UTC, datetime, timedelta
from itertools import combinations
from random import Random

import pytest

from compute.models import Allocation, Holding, Offering
from compute.placement import Room
from compute.preemption import Unit, _fits, _Node, _node_plan, _plus
from instances.lifecycle import instance_order, queue_drain
from instances.models import Instance
from tests.factories import fund, make_user

H100 = "NVIDIA H100 80GB HBM3"
IMAGE = "pytorch-2.1"


def _order(user, gpus, billing="hourly"):
    offering = Offering.objects.get(name=f"{gpus}× H100 80GB SXM")
    instance, _created = instance_order(
        user=user, offering_id=offering.id, image_id=IMAGE, billing=billing
    )
    assert instance.status in ("provisioning", "queued")
    return instance


def _node(instance):
    return (
        Allocation.objects.filter(holding_id=instance.id).values_list("node_id", flat=True).first()
    )


def _noticed():
    return set(Holding.objects.filter(preempt_at__isnull=False).values_list("id", flat=True))


@pytest.fixture
def user(catalog):
    person = make_user()
    fund(person, 5_000_000)
    return person


def test_a_paying_order_takes_spot_back_where_paying_rentals_pack(user):
    hourly = _order(user, 4)
    spot_four = _order(user, 4, billing="spot")  # best fit: beside the hourly rental
    spot_eight = _order(user, 8, billing="spot")  # the other node, the youngest spot holding
    assert _node(spot_four) == _node(hourly) != _node(spot_eight)
    late = _order(user, 1)
    assert late.status == "queued"  # no GPU is free

    queue_drain(product=H100)
    # one holding either way: the node with the hourly rental, not the youngest holding on the
    # node free of paying rentals (which stays whole for an 8-GPU order)
    assert _noticed() == {spot_four.id}
    assert Instance.objects.get(pk=spot_four.pk).stop_reason == "preempted"
    assert Instance.objects.get(pk=spot_eight.pk).stop_reason == ""


def test_packing_comes_before_fewer_holdings(user):
    hourly = _order(user, 4)
    twos = [_order(user, 2, billing="spot") for _ in range(2)]  # beside the hourly rental
    spot_eight = _order(user, 8, billing="spot")
    assert {_node(two) for two in twos} == {_node(hourly)} != {_node(spot_eight)}
    late = _order(user, 4)
    assert late.status == "queued"

    queue_drain(product=H100)
    # two holdings beside the hourly rental, not the one on the node free of paying rentals,
    # which stays whole for an 8-GPU order (and 4 GPUs of spot work are stopped, not 8)
    assert _noticed() == {two.id for two in twos}
    assert Instance.objects.get(pk=spot_eight.pk).stop_reason == ""
    eight = _order(user, 8)
    assert eight.status == "queued"
    queue_drain(product=H100)
    assert _noticed() == {*(two.id for two in twos), spot_eight.id}


def test_among_nodes_equally_packed_the_fewest_holdings_go(user):
    fours = [_order(user, 4, billing="spot") for _ in range(2)]  # one node, two holdings
    twos = [_order(user, 2, billing="spot") for _ in range(4)]  # the other, four holdings
    assert len({_node(four) for four in fours}) == 1
    assert {_node(two) for two in twos}.isdisjoint({_node(four) for four in fours})
    late = _order(user, 4)
    assert late.status == "queued"

    queue_drain(product=H100)
    # no paying rental on either node: one 4-GPU holding (the younger), not two 2-GPU ones
    assert _noticed() == {fours[1].id}


def test_a_nodes_plan_stops_looking_once_no_larger_set_can_win():
    """_node_plan stops at sets larger than the cheapest fit's cost (each unit not under notice
    costs a holding at least); its answer is the cheapest, youngest set that fits, as looking
    at every subset finds it: seeded random nodes of one- to four-GPU units (gangs among them),
    some under notice, and orders of 1 to 8 GPUs."""
    picker = Random(28)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    compared = 0
    for case in range(300):
        units: list[Unit] = []
        paying = used = picker.randrange(0, 3)  # GPUs held by paying rentals
        while used < 8 and len(units) < 8:
            gpus = min(picker.choice((1, 1, 2, 4)), 8 - used)
            used += gpus
            holdings = tuple(f"h{case}-{len(units)}-{k}" for k in range(picker.choice((1, 1, 2))))
            created = start + timedelta(minutes=picker.randrange(10_000))
            noticed = picker.random() < 0.15
            freed = (gpus * 8000, gpus * 64 * 1024, 0, 1)
            units.append(
                Unit(f"u{len(units)}", holdings, created, noticed, {"n": gpus}, {"n": freed})
            )
        node = _Node("n", 8, 8 - used, Room(4000, 32 * 1024, 10**6, 10), paying)
        offering = Offering(
            gpu_count=picker.choice((1, 2, 4, 8)), cpu_cores=8, memory_gb=64, local_disk_gb=0
        )

        # every subset of the units not under notice, the cheapest then youngest that fits
        free, room = node.free, node.room
        for unit in units:
            if unit.noticed:
                free, room = free + unit.gpus["n"], _plus(room, unit.room["n"])
        others = [unit for unit in units if not unit.noticed]
        keys = []
        for size in range(len(others) + 1):
            for chosen in combinations(others, size):
                left = room
                for unit in chosen:
                    left = _plus(left, unit.room["n"])
                gpus = free + sum(unit.gpus["n"] for unit in chosen)
                if _fits(gpus, left, offering, gpu_count=8, whole=False):
                    oldest = min((u.created_at.timestamp() for u in chosen), default=0.0)
                    keys.append((sum(u.cost for u in chosen), -oldest))

        found = _node_plan(offering, node, units, whole=False)
        if not keys:
            assert found is None
            continue
        assert found is not None and found[0] == min(keys)
        compared += 1
    assert compared > 100  # most cases have a plan to compare
