"""Backfilling (compute.queue: reserve, spare; served by instances.lifecycle.queue_drain) on
PostgreSQL and the emulated fleet's two 8×H100 nodes: a small order behind a large one that
does not fit starts on GPUs the large one is not kept; a paying one never takes the GPUs kept
for an order ahead (it never delays one), so the large one starts as soon as its node's
holders end; spot takes only GPUs no paying order is kept, or kept for one that cannot start
before paying rentals end (it takes them back with notice then: one grace at most); every
paying order ahead keeps its own GPUs; among equals, first come first served."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from compute.models import Allocation, Holding, Offering
from compute.queue import Load, Shape, Unplannable, reserve, spare
from instances.lifecycle import instance_order, instance_terminate, queue_drain
from instances.models import Instance
from instances.states import instance_mark_stopped, instance_mark_terminated
from tests.factories import fund, make_user

H100 = "NVIDIA H100 80GB HBM3"
IMAGE = "pytorch-2.1"


def _order(user, gpus, billing="hourly"):
    offering = Offering.objects.get(name=f"{gpus}× H100 80GB SXM")
    instance, _created = instance_order(
        user=user, offering_id=offering.id, image_id=IMAGE, billing=billing
    )
    return instance


def _end(instance):
    instance_terminate(instance_id=instance.id)
    instance_mark_terminated(instance.id, disk_claim="")


def _node(instance):
    return (
        Allocation.objects.filter(holding_id=instance.id).values_list("node_id", flat=True).first()
    )


def _status(instance):
    return Instance.objects.get(pk=instance.pk).status


@pytest.fixture
def busy(catalog):
    """Two H100 nodes partly held by hourly rentals: `fuller` has 6 GPUs held (2 free),
    `emptier` 4 (4 free); an 8-GPU order waits (no whole node is free)."""
    user = make_user()
    fund(user, 5_000_000)
    four = _order(user, 4)
    two = _order(user, 2)  # best fit: next to the four
    other = _order(user, 4)  # the other node
    assert _node(four) == _node(two) != _node(other)
    head = _order(user, 8)
    assert head.status == "queued"
    return {
        "user": user,
        "fuller": _node(four),
        "emptier": _node(other),
        "other": other,
        "head": head,
    }


def test_a_small_order_behind_a_blocked_large_one_starts(busy):
    small = _order(busy["user"], 2)
    assert small.status == "queued"  # at its order, someone waits ahead

    assert queue_drain(product=H100) == [small.id]
    # on the GPUs the head is not kept: the fuller node's two free ones
    assert _node(small) == busy["fuller"]
    assert _status(busy["head"]) == "queued"


def test_a_backfilled_order_never_delays_the_head(busy):
    user = busy["user"]
    fits_kept = _order(user, 4)  # would fit on the emptier node's 4 free GPUs
    queue_drain(product=H100)
    # the emptier node is kept for the head: the paying order behind does not take it
    assert _status(fits_kept) == "queued"
    held = Allocation.objects.filter(node_id=busy["emptier"]).values_list("holding_id", flat=True)
    assert set(held) == {busy["other"].id}
    # its holder ends: the head starts at once, on it, before anyone behind
    _end(busy["other"])
    assert queue_drain(product=H100) == [busy["head"].id]
    assert _node(busy["head"]) == busy["emptier"] and _status(fits_kept) == "queued"


def test_spot_takes_kept_gpus_only_until_their_order_could_start(busy):
    spot_four = _order(busy["user"], 4, billing="spot")
    spot_two = _order(busy["user"], 2, billing="spot")
    assert (spot_four.status, spot_two.status) == ("queued", "queued")  # behind the paying head

    # the head is kept the emptier node, but it cannot start there before the hourly rental
    # on it ends: spot takes its four free GPUs meanwhile, and the fuller node's two
    assert sorted(queue_drain(product=H100)) == sorted([spot_four.id, spot_two.id])
    assert (_node(spot_four), _node(spot_two)) == (busy["emptier"], busy["fuller"])
    _end(busy["other"])
    # the head's node frees but for spot: the head takes that back, with notice, and waits
    assert queue_drain(product=H100) == []
    assert Holding.objects.get(pk=spot_four.pk).preempt_at is not None
    assert Holding.objects.get(pk=spot_two.pk).preempt_at is None
    assert Instance.objects.get(pk=spot_four.pk).stop_reason == "preempted"
    # its pod is gone (at the deadline at the latest): the head starts, before anyone behind
    instance_mark_stopped(spot_four.id)
    assert queue_drain(product=H100) == [busy["head"].id]
    assert _node(busy["head"]) == busy["emptier"]


def test_spot_never_takes_gpus_kept_for_an_order_that_waits_only_for_spot(catalog):
    user = make_user()
    fund(user, 5_000_000)
    spot_four = _order(user, 4, billing="spot")
    hourly = _order(user, 8)  # the other node
    head = _order(user, 8)
    assert head.status == "queued"
    assert queue_drain(product=H100) == []
    assert Holding.objects.get(pk=spot_four.pk).preempt_at is not None
    # the head is kept spot_four's node, where nothing but spot stands in its way: the four
    # GPUs free there stay free for it, and a spot order waits
    late = _order(user, 2, billing="spot")
    assert queue_drain(product=H100) == []
    assert _status(late) == "queued"
    assert set(
        Allocation.objects.filter(node_id=_node(spot_four)).values_list("holding_id", flat=True)
    ) == {spot_four.id}
    assert _node(hourly) != _node(spot_four)


def test_a_paying_order_is_kept_the_gpus_its_notices_free(catalog):
    user = make_user()
    fund(user, 5_000_000)
    hourly = _order(user, 4)
    beside = [_order(user, 2, billing="spot") for _ in range(2)]  # best fit: next to it
    other = [_order(user, 2, billing="spot") for _ in range(4)]  # the other node, full
    packed = _node(hourly)
    assert {_node(i) for i in beside} == {packed} != {_node(i) for i in other}
    head = _order(user, 4)
    assert head.status == "queued"
    queue_drain(product=H100)
    # two holdings either way: where the hourly rental packs (compute.preemption.plan)
    assert set(Holding.objects.filter(preempt_at__isnull=False).values_list("id", flat=True)) == {
        i.id for i in beside
    }

    # one pod is gone, the other not yet: its two GPUs stay kept for the head, not for the
    # node free of paying rentals, so a spot order waits rather than take them (and the head
    # give notice again once it had)
    instance_mark_stopped(beside[0].id)
    late = _order(user, 2, billing="spot")
    assert queue_drain(product=H100) == []
    assert _status(late) == "queued"
    instance_mark_stopped(beside[1].id)
    assert queue_drain(product=H100) == [head.id]
    assert _node(head) == packed
    assert Holding.objects.filter(preempt_at__isnull=False, state="placed").count() == 0


def test_an_order_is_kept_gpus_where_its_notices_went():
    loads = [_load("a", 2, 4), _load("b", 0, 0)]  # two of a's GPUs freed already
    kept: dict[str, int] = {}
    from_spot: dict[str, int] = {}
    assert reserve(loads, kept, gpus=4, whole=False, from_spot=from_spot, noticed_on=("a",))
    # not b, where the fewest GPUs stay held: a's spot GPUs are the ones being taken back
    assert kept == from_spot == {"a": 4}
    assert spare(loads, from_spot) == 0  # what they free stays free for it, not for spot


def test_a_reservation_that_waits_for_paying_rentals_ignores_free_gpus():
    # an 8-GPU order on two nodes that hourly rentals hold equally: on neither could it start
    # once spot is gone, so the GPUs free now (which notices and spot starts change) do not
    # decide where it is kept
    for free_a, free_b in ((0, 4), (4, 0)):
        kept: dict[str, int] = {}
        assert reserve([_load("a", free_a, 4), _load("b", free_b, 4)], kept, gpus=8, whole=True)
        assert kept == {"a": 8}


def test_a_paying_order_behind_one_that_waits_for_paying_rentals_starts_after_one_notice(
    catalog,
):
    user = make_user()
    fund(user, 5_000_000)
    fours = [_order(user, 4), _order(user, 4)]  # one node full
    twos = [_order(user, 2), _order(user, 2)]  # the other, best fit: side by side
    _end(fours[1])  # four GPUs held by hourly rentals on each node
    spot = [_order(user, 4, billing="spot") for _ in range(2)]  # the rest, one on each
    assert {_node(i) for i in spot} == {_node(fours[0]), _node(twos[0])}
    head = _order(user, 8)  # can start on neither before an hourly rental ends
    small = _order(user, 1)
    assert (head.status, small.status) == ("queued", "queued")
    assert queue_drain(product=H100) == []
    (noticed,) = Holding.objects.filter(preempt_at__isnull=False).values_list("id", flat=True)
    freed = Allocation.objects.filter(holding_id=noticed).values_list("node_id", flat=True)[0]

    # its pod is gone: the GPUs it freed are the small order's, though the node they are on
    # now has more free than the one the head is kept
    instance_mark_stopped(noticed)
    assert queue_drain(product=H100) == [small.id]
    assert _node(small) == freed
    assert Holding.objects.filter(preempt_at__isnull=False, state="placed").count() == 0
    assert _status(head) == "queued"


def test_every_paying_order_ahead_keeps_its_gpus(busy):
    user = busy["user"]
    second = _order(user, 8)  # keeps the fuller node, once the head has the emptier
    small = _order(user, 1)
    assert queue_drain(product=H100) == []
    assert [_status(i) for i in (busy["head"], second, small)] == ["queued"] * 3


def test_first_come_first_served_among_equals(busy):
    user = busy["user"]
    first, second = _order(user, 2), _order(user, 2)

    assert queue_drain(product=H100) == [first.id]
    assert _status(second) == "queued"


def _load(node_id, free, staying):
    return Load(node_id, 8, free, staying)


def test_a_reservation_goes_where_the_fewest_gpus_stay_held():
    loads = [_load("a", 1, 7), _load("b", 2, 3), _load("c", 0, 3)]
    kept: dict[str, int] = {}

    from_spot: dict[str, int] = {}

    assert reserve(loads, kept, gpus=4, whole=False, from_spot=from_spot)
    assert kept == {"b": 4}  # as few held as c, more free
    assert from_spot == {"b": 4}  # it could start on b once spot is gone
    assert spare(loads, kept) == 1  # a's free GPU; b's two are kept
    assert reserve(loads, kept, gpus=8, whole=True, count=2, from_spot=from_spot)
    assert kept == {"b": 4, "a": 8, "c": 8}
    # a's and c's hourly rentals must end first: spot may use them meanwhile
    assert from_spot == {"b": 4}
    assert spare(loads, from_spot) == 1
    assert not reserve(loads, kept, gpus=8, whole=True)  # every whole node is kept
    assert reserve(loads, kept, gpus=4, whole=False)  # b still has 4 not kept
    assert not reserve(loads, kept, gpus=1, whole=False)
    assert spare(loads, kept) <= 0


def test_a_spot_order_that_waits_is_served_at_once(busy, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        spot = _order(busy["user"], 2, billing="spot")

    # queued behind the head at its order, then started by the drain its order asked for
    assert _status(spot) != "queued" and _node(spot) == busy["fuller"]


def _drain_queries():
    with CaptureQueriesContext(connection) as queries:
        assert queue_drain(product=H100) == []
    return len(queries)


@pytest.fixture
def full(catalog, settings):
    """Both H100 nodes held whole by hourly rentals: every order waits."""
    settings.MAX_QUEUED_ORDERS = 100
    user = make_user()
    fund(user, 50_000_000)
    assert [_order(user, 8).status for _ in range(2)] == ["provisioning"] * 2
    return user


def test_a_drain_looks_at_each_waiting_order_in_a_bounded_number_of_queries(full):
    """A drain plans every waiting paying order (a reservation each), but reads the nodes'
    loads once and does not look for room, nor for spot GPUs to take back, again for an order
    that asks as much as one that found none (compute.queue.Unplannable): each more waiting
    order costs its transaction, its place in line and lock, its balance and its budget (8
    queries; 16 when every order read the loads, looked for a node and planned a preemption).
    Were any of those per-order reads back, this would count more."""
    for _ in range(3):
        _order(full, 1)
    few = _drain_queries()
    for _ in range(6):
        _order(full, 1)
    many = _drain_queries()
    assert (many - few) / 6 <= 8
    assert Holding.objects.filter(state="queued").count() == 9  # all of them still wait


def test_an_order_that_asks_as_much_as_one_that_found_no_room_is_not_looked_at():
    memo = Unplannable()
    two = Shape(region="", whole=False, nodes=1, gpus=2, need=(8000, 64, 100, 1))
    memo.remember(memo.no_room, two)
    assert memo.roomless(Shape("", False, 1, 4, (8000, 64, 100, 1)))
    assert memo.roomless(Shape("eu", False, 1, 2, (16000, 128, 100, 1)))  # any region: this too
    assert not memo.roomless(Shape("", False, 1, 1, (8000, 64, 100, 1)))  # fewer GPUs
    assert not memo.roomless(Shape("", False, 1, 4, (4000, 64, 100, 1)))  # less CPU
    assert not memo.roomless(Shape("", True, 1, 2, (8000, 64, 100, 1)))  # a whole node
    memo.remember(memo.no_plan, Shape("eu", True, 2, 8, (0, 0, 0, 1)))
    assert memo.planless(Shape("eu", True, 3, 8, (0, 0, 0, 1)))  # more ranks
    assert not memo.planless(Shape("", True, 3, 8, (0, 0, 0, 1)))  # other regions may
    assert not memo.planless(Shape("eu", True, 2, 4, (0, 0, 0, 1)))  # other whole nodes
