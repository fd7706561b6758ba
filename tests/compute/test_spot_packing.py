"""Where a paying order takes spot GPUs back, on PostgreSQL and the emulated fleet's two 8×H100
nodes (compute.preemption.plan): where placement would put it were those GPUs free, the node
whose GPUs paying rentals hold most (best fit), so paying rentals pack as on free GPUs and
another node stays free of them for a whole-node or 8-GPU order; there the fewest holdings,
the youngest first; among nodes equally packed, the fewest holdings, then the youngest."""

import pytest

from compute.models import Allocation, Holding, Offering
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
