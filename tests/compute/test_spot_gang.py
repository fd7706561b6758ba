"""A paying gang order (a cluster's or a multi-node job's whole nodes) that finds no free
nodes but enough held by spot takes them back through the one plan (compute.preemption): the
fewest holdings, the youngest first, a whole spot gang or nothing; never an hourly or monthly
holding, and nothing at all when even every spot holding would not free enough nodes. Played on
the emulated fleet's two H100 nodes."""

import pytest

from compute.models import Holding, Offering
from compute.preemption import plan
from instances.lifecycle import instance_order, queue_drain
from instances.models import Instance
from instances.provisioning import converge
from tests.factories import WHOLE_NODE, converge_until, fund, make_cluster, make_user

IMAGE = "pytorch-2.1"
H100 = "NVIDIA H100 80GB HBM3"


def _node(user, billing):
    instance, _created = instance_order(
        user=user,
        offering_id=Offering.objects.get(name=WHOLE_NODE).id,
        image_id=IMAGE,
        billing=billing,
    )
    assert converge_until(converge.provision, instance.id) == "running"
    return instance


def _status(instance):
    return Instance.objects.get(pk=instance.pk).status


def _taken():
    return set(Holding.objects.filter(preempt_at__isnull=False).values_list("id", flat=True))


@pytest.fixture
def people(catalog):
    spot, paying = make_user(), make_user()
    for person in (spot, paying):
        fund(person, 5_000_000)
    return spot, paying


def test_a_paying_cluster_takes_two_spot_nodes_back(people):
    spot, paying = people
    spots = [_node(spot, "spot") for _ in range(2)]
    cluster = make_cluster(paying, node_count=2)
    ranks = list(Instance.objects.filter(holding__gang=cluster.pk))
    assert {rank.status for rank in ranks} == {"queued"}
    queue_drain(product=H100)
    assert [_status(i) for i in spots] == ["stopping", "stopping"]
    assert _taken() == {i.pk for i in spots}
    assert {Instance.objects.get(pk=i.pk).stop_reason for i in spots} == {"preempted"}
    # the notices free both nodes: the cluster's ranks get them together once the pods are gone
    for instance in spots:
        assert converge_until(converge.stop, instance.id) == "stopped"
    queue_drain(product=H100)
    assert {_status(rank) for rank in ranks} == {"provisioning"}


def test_a_paying_cluster_takes_a_spot_gang_back_whole(people):
    spot, paying = people
    gang = make_cluster(spot, node_count=2, billing="spot")
    spot_ranks = list(Instance.objects.filter(holding__gang=gang.pk))
    assert {r.status for r in spot_ranks} == {"provisioning"}
    cluster = make_cluster(paying, node_count=2)
    queue_drain(product=H100)
    assert {_status(r) for r in spot_ranks} == {"stopping"}
    assert _taken() == {r.pk for r in spot_ranks}
    assert {_status(r) for r in Instance.objects.filter(holding__gang=cluster.pk)} == {"queued"}


def test_a_paying_cluster_never_takes_an_hourly_node(people):
    spot, paying = people
    hourly = _node(paying, "hourly")
    victim = _node(spot, "spot")
    cluster = make_cluster(paying, node_count=2)
    queue_drain(product=H100)
    # one node is the hourly rental's: even the spot one would not make room for two
    assert plan(Offering.objects.get(name=WHOLE_NODE), nodes=2) is None
    assert _taken() == set()
    assert (_status(hourly), _status(victim)) == ("running", "running")
    assert Instance.objects.get(pk=victim.pk).stop_reason == ""
    assert {_status(r) for r in Instance.objects.filter(holding__gang=cluster.pk)} == {"queued"}


def test_the_gang_plan_takes_the_fewest_then_the_youngest(people):
    spot, _paying = people
    older, younger = _node(spot, "spot"), _node(spot, "spot")
    whole = Offering.objects.get(name=WHOLE_NODE)
    one = plan(whole, nodes=1)
    assert one is not None and [u.holdings for u in one.units] == [(younger.pk,)]
    two = plan(whole, nodes=2)
    assert two is not None and sorted(h for u in two.units for h in u.holdings) == sorted(
        [older.pk, younger.pk]
    )
    assert plan(whole, nodes=3) is None  # the fleet has two H100 nodes
    assert _taken() == set()  # planning takes nothing
