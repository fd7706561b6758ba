"""Headroom kept from spot (SPOT_HEADROOM_NODES; compute.queue.headroom, placement.spot_kept,
preemption.headroom_clear) on PostgreSQL and the emulated fleet's two 8×H100 nodes: spot takes
no GPU of the nodes left to paying orders, a paying order starts on them at once (no notice
waited out), spot found on them is taken back with notice, and a node paying orders break
into stays the one left free while it has the most GPUs free (nothing else is taken back)."""

import pytest

from compute.models import Holding
from compute.queue import Load, headroom
from instances.lifecycle import queue_drain
from instances.states import instance_mark_stopped
from tests.compute.test_backfill import H100, _node, _order, _status
from tests.factories import fund, make_user


def _load(node_id, free, staying, *, region="r1", going=0):
    return Load(node_id, 8, free, staying, region, going)


def test_headroom_is_the_nodes_with_the_most_gpus_free_or_freeing_in_each_region():
    loads = [
        _load("a", 2, 6),
        _load("b", 0, 0, going=5),  # five GPUs of spot under notice: about to be free
        _load("c", 4, 4),
        _load("d", 1, 0, region="r2"),
        _load("e", 1, 3, region="r2"),
    ]
    assert headroom(loads, 1) == {"b": 8, "d": 8}
    assert headroom(loads, 2) == {"b": 8, "c": 8, "d": 8, "e": 8}
    assert headroom(loads, 0) == {}


def test_among_full_nodes_the_one_spot_alone_holds_is_left_free():
    # every GPU held: the node without paying rentals clears into a whole free one
    loads = [_load("a", 0, 3), _load("b", 0, 0), _load("c", 0, 8)]
    assert headroom(loads, 1) == {"b": 8}
    assert headroom([_load("b", 0, 0), _load("a", 0, 0)], 1) == {"a": 8}  # then by id


@pytest.fixture
def user(catalog):
    user = make_user()
    fund(user, 5_000_000)
    return user


def test_spot_leaves_the_headroom_node_and_a_paying_order_starts_there_at_once(user, settings):
    settings.SPOT_HEADROOM_NODES = 1
    first = _order(user, 8, billing="spot")
    second = _order(user, 8, billing="spot")
    assert _status(first) == "provisioning"
    assert _status(second) == "queued"  # the other node is left to paying orders
    assert queue_drain(product=H100) == []
    assert _status(second) == "queued"

    paying = _order(user, 8)
    assert _status(paying) == "provisioning"  # at once: no notice waited out
    assert _node(paying) != _node(first)
    assert Holding.objects.filter(preempt_at__isnull=False).count() == 0


def test_without_headroom_spot_takes_every_node(user):
    first = _order(user, 8, billing="spot")
    second = _order(user, 8, billing="spot")
    assert {_status(first), _status(second)} == {"provisioning"}
    paying = _order(user, 8)
    assert _status(paying) == "queued"  # it waits out a notice
    queue_drain(product=H100)
    assert Holding.objects.filter(preempt_at__isnull=False).count() == 1


def test_spot_found_on_the_headroom_node_is_taken_back_and_not_restarted_there(user, settings):
    first = _order(user, 8, billing="spot")
    second = _order(user, 8, billing="spot")
    assert {_status(first), _status(second)} == {"provisioning"}
    settings.SPOT_HEADROOM_NODES = 1  # the operator sets it while spot holds every GPU
    queue_drain(product=H100)
    noticed = list(Holding.objects.filter(preempt_at__isnull=False).values_list("id", flat=True))
    # both nodes are full and free of paying rentals: the first by id is left free
    left = min(_node(first), _node(second))
    assert noticed == [first.id if _node(first) == left else second.id]
    gone = first if noticed == [first.id] else second

    node = _node(gone)
    instance_mark_stopped(gone.id)  # its pod is gone at the deadline
    again = _order(user, 8, billing="spot")
    assert queue_drain(product=H100) == []
    assert _status(again) == "queued"
    paying = _order(user, 8)
    assert _status(paying) == "provisioning"
    assert _node(paying) == node


def test_a_node_paying_orders_broke_into_stays_the_free_one_and_nothing_else_is_taken_back(
    user, settings
):
    settings.SPOT_HEADROOM_NODES = 1
    spot = _order(user, 8, billing="spot")
    small = _order(user, 1)  # the only free GPUs are on the headroom node
    assert _status(small) == "provisioning"
    assert _node(small) != _node(spot)
    queue_drain(product=H100)
    # 7 GPUs free there against none on the spot node: it stays the headroom, and the spot
    # holding is not taken back for it
    assert Holding.objects.filter(preempt_at__isnull=False).count() == 0
    late = _order(user, 2, billing="spot")
    assert queue_drain(product=H100) == []
    assert _status(late) == "queued"
    four = _order(user, 4)
    assert _status(four) == "provisioning"
    assert _node(four) == _node(small)
