"""Headroom kept from spot (SPOT_HEADROOM; compute.preemption.headroom, headroom_clear;
instances.lifecycle._kept) on PostgreSQL and the emulated fleet's two 8×H100 nodes: spot takes none of the GPUs
the next paying order of each size would be placed on were spot gone, so those start on arrival
(no notice waited out) where they would have without spot; spot found on those GPUs is taken
back with notice beforehand; and no headroom is kept while a paying order waits in line."""

from compute.models import Holding
from instances.lifecycle import instance_start, queue_drain
from instances.states import instance_mark_stopped
from tests.compute.test_backfill import H100, _node, _order, _status
from tests.factories import fund, make_user


def _user():
    user = make_user()
    fund(user, 5_000_000)
    return user


def _noticed():
    return set(Holding.objects.filter(preempt_at__isnull=False).values_list("id", flat=True))


def test_paying_orders_of_every_size_start_on_arrival_where_spot_was_kept_off(catalog, settings):
    settings.SPOT_HEADROOM = 1
    user = _user()
    # on two empty nodes: one whole node kept for an 8-GPU order, and 4 + 2 + 1 GPUs on the
    # other (best fit, as they would go without spot): one GPU is left to spot
    spot = _order(user, 1, billing="spot")
    late = _order(user, 1, billing="spot")
    assert (_status(spot), _status(late)) == ("provisioning", "queued")
    assert queue_drain(product=H100) == []
    assert _status(late) == "queued"

    four, two, one = _order(user, 4), _order(user, 2), _order(user, 1)
    eight = _order(user, 8)
    assert {_status(i) for i in (four, two, one, eight)} == {"provisioning"}  # none waited
    assert _node(four) == _node(two) == _node(one) == _node(spot) != _node(eight)
    assert _noticed() == set()


def test_without_headroom_a_paying_order_waits_out_a_notice(catalog):
    user = _user()
    first = _order(user, 8, billing="spot")
    second = _order(user, 8, billing="spot")
    assert {_status(first), _status(second)} == {"provisioning"}
    paying = _order(user, 8)
    assert _status(paying) == "queued"
    queue_drain(product=H100)
    assert len(_noticed()) == 1


def test_spot_on_the_kept_gpus_is_taken_back_and_not_restarted_there(catalog, settings):
    user = _user()
    first = _order(user, 8, billing="spot")
    second = _order(user, 8, billing="spot")
    assert {_status(first), _status(second)} == {"provisioning"}

    settings.SPOT_HEADROOM = 1  # the operator turns it on while spot holds every GPU
    queue_drain(product=H100)
    # a whole node for an 8-GPU order, and 4 + 2 + 1 GPUs on the other: both spot holdings go
    assert _noticed() == {first.id, second.id}
    for gone in (first, second):
        instance_mark_stopped(gone.id)  # their pods are gone at the deadline
    instance_start(instance_id=first.id)  # back in line: only one GPU is left to spot
    assert queue_drain(product=H100) == []
    assert _status(first) == "queued"
    small = _order(user, 1, billing="spot")  # behind it in line; backfilled on the one GPU
    assert queue_drain(product=H100) == [small.id]

    eight, four = _order(user, 8), _order(user, 4)
    assert {_status(eight), _status(four)} == {"provisioning"}
    assert _node(eight) != _node(four) == _node(small)


def test_no_headroom_is_kept_while_a_paying_order_waits(catalog, settings):
    user = _user()
    _order(user, 8, billing="spot")
    _order(user, 8, billing="spot")
    head = _order(user, 8)
    assert _status(head) == "queued"
    settings.SPOT_HEADROOM = 1
    queue_drain(product=H100)
    # the waiting order takes back one node's spot for itself; nothing more for headroom
    assert len(_noticed()) == 1
