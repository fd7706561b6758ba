"""Ordering a cluster: whole nodes for every rank in one transaction or none, packed under as
few leaf switches as possible, queued as one order first come first served with instances of
the same GPU, under the runway of the whole cluster and the account's limits."""

import pytest

from billing.models import LedgerTransaction, Wallet
from clusters.models import Cluster
from clusters.preflight import preflight_run
from clusters.services import cluster_order
from compute.models import Allocation, Offering
from compute.placement import pack
from fleet.models import Node
from instances.lifecycle import instance_order, instance_terminate, queue_drain
from instances.models import Instance
from instances.provisioning import converge
from starverse.core.errors import Conflict, InsufficientBalance, TooManyRequests
from tests.conftest import run_threads
from tests.factories import WHOLE_NODE, converge_until, fund, make_cluster, make_user

IMAGE = "pytorch-2.1"
H100 = "NVIDIA H100 80GB HBM3"


def _node_offering():
    return Offering.objects.get(name=WHOLE_NODE)


def _post(client, **body):
    data = {"offering": _node_offering().id, "image": IMAGE, "node_count": 2, **body}
    return client.post("/api/v1/clusters", data, format="json")


def _ledger(user):
    wallet = Wallet.objects.get(tenant=user.tenant)
    return wallet.total_fen, LedgerTransaction.objects.filter(wallet=wallet).count()


def _paying_user(fen=1_000_000):
    user = make_user()
    fund(user, fen)
    return user


def _take_node(user):
    """One whole H100 node rented by `user` (placed, so it holds all its GPUs)."""
    instance, _created = instance_order(user=user, offering_id=_node_offering().id, image_id=IMAGE)
    assert instance.status == "provisioning"
    return instance


def test_pack_takes_fewest_switches_and_keeps_big_ones_whole():
    free = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3", "b4", "b5"], "c": ["c1", "c2"]}
    # one switch holds 3: the smallest that does (a), so b stays whole
    assert pack(free, 3, one_switch=False) == ["a1", "a2", "a3"]
    assert pack(free, 2, one_switch=False) == ["c1", "c2"]
    # 6 need two switches: the largest (b, 5) and the smallest that holds the last one (c)
    assert pack(free, 6, one_switch=False) == ["b1", "b2", "b3", "b4", "b5", "c1"]
    assert pack(free, 10, one_switch=False) == [*free["b"], *free["a"], *free["c"]]
    assert pack(free, 11, one_switch=False) is None
    assert pack(free, 5, one_switch=True) == free["b"]
    assert pack(free, 6, one_switch=True) is None


def test_order_places_every_rank_on_its_own_whole_node(catalog, client_for):
    user = _paying_user()
    response = _post(client_for(user), template="deepspeed")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "provisioning"
    assert body["node_count"] == 2
    assert body["template"] == "deepspeed"
    assert body["switches_spanned"] == 1
    assert body["queue_position"] is None
    assert body["preflight"] is None
    assert body["cost_fen"] == 0
    assert body["price_per_hour_fen"] == 2 * _node_offering().price_per_hour_fen
    assert [r["rank"] for r in body["ranks"]] == [0, 1]
    assert sorted(r["node"] for r in body["ranks"]) == ["gpu-h100-0", "gpu-h100-1"]
    assert {r["switch"] for r in body["ranks"]} == {"h100-leaf-0"}
    assert {r["status"] for r in body["ranks"]} == {"provisioning"}
    ranks = Instance.objects.filter(cluster_rank__cluster_id=body["id"]).order_by(
        "cluster_rank__index"
    )
    for rank in ranks:
        assert sorted(
            Allocation.objects.filter(holding__instance=rank).values_list("gpu_index", flat=True)
        ) == list(range(8))
    assert {rank.node_id for rank in ranks} == set(
        Node.objects.filter(gpu_product=H100).values_list("pk", flat=True)
    )


def test_node_sync_reads_topology_labels(catalog):
    node = Node.objects.get(name="gpu-h100-1")
    assert (node.rack, node.switch, node.fabric) == ("h100-rack-0", "h100-leaf-0", "h100-ib")


def test_refused_orders_create_nothing(catalog, client_for, settings):
    user = _paying_user()
    client = client_for(user)
    cloud = Offering.objects.get(name="1× H100 80GB SXM")
    before = _ledger(user)
    answer = _post(client, offering=cloud.id)
    assert (answer.status_code, answer.json()["code"]) == (400, "not_whole_node")
    answer = _post(client, node_count=3)  # the emulated fleet has two H100 nodes
    assert (answer.status_code, answer.json()["code"]) == (400, "too_many_nodes")
    settings.CLUSTER_MAX_NODES = 1
    answer = _post(client)
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_node_count")
    assert _post(client, node_count=1).status_code == 400
    assert not Cluster.objects.exists()
    assert not Instance.objects.exists()
    assert _ledger(user) == before


def test_runway_is_an_hour_of_every_node(catalog):
    user = make_user()
    price = _node_offering().price_per_hour_fen
    # in cash: the trial credit (¥10) does not cover two nodes at their trial price either
    fund(user, 2 * price - 1)
    with pytest.raises(InsufficientBalance):
        cluster_order(user=user, offering_id=_node_offering().id, image_id=IMAGE, node_count=2)
    assert not Cluster.objects.exists()
    assert not Instance.objects.exists()
    assert not Allocation.objects.exists()
    fund(user, 1, key="last fen")
    cluster, _created = cluster_order(
        user=user, offering_id=_node_offering().id, image_id=IMAGE, node_count=2
    )
    assert Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).count() == 16


def test_a_cluster_counts_all_its_gpus_and_queues_as_one_order(catalog, settings):
    settings.MAX_RUNNING_GPUS = 15
    user = _paying_user()
    with pytest.raises(Conflict) as refused:
        make_cluster(user)
    assert refused.value.code == "gpu_limit"
    assert not Instance.objects.exists()
    settings.MAX_RUNNING_GPUS = 64
    settings.MAX_QUEUED_ORDERS = 1
    _take_node(_paying_user())
    queued = make_cluster(user)
    assert set(queued.ranks.values_list("instance__status", flat=True)) == {"queued"}
    with pytest.raises(TooManyRequests) as too_many:
        make_cluster(user)
    assert too_many.value.code == "queue_limit"
    assert Cluster.objects.filter(tenant=user.tenant).count() == 1


def test_idempotency_key_answers_the_same_cluster(catalog, client_for):
    client = client_for(_paying_user())
    first = client.post(
        "/api/v1/clusters",
        {"offering": _node_offering().id, "image": IMAGE, "node_count": 2},
        format="json",
        headers={"Idempotency-Key": "k1"},
    )
    again = client.post(
        "/api/v1/clusters",
        {"offering": _node_offering().id, "image": IMAGE, "node_count": 2},
        format="json",
        headers={"Idempotency-Key": "k1"},
    )
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    other = client.post(
        "/api/v1/clusters",
        {"offering": _node_offering().id, "image": IMAGE, "node_count": 2, "template": "none"},
        format="json",
        headers={"Idempotency-Key": "k1"},
    )
    assert other.status_code == 409
    assert Cluster.objects.count() == 1
    assert Instance.objects.count() == 2


def test_queued_cluster_waits_first_come_first_served_and_never_bills(catalog, client_for):
    holder = _paying_user()
    held = _take_node(holder)
    user = _paying_user(100_000_000)
    before = _ledger(user)
    answer = _post(client_for(user), billing="monthly")
    body = answer.json()
    assert answer.status_code == 202
    assert (body["status"], body["queue_position"], body["switches_spanned"]) == ("queued", 1, None)
    assert {r["node"] for r in body["ranks"]} == {None}
    assert not Allocation.objects.filter(
        holding__instance__cluster_rank__cluster_id=body["id"]
    ).exists()
    # an instance ordered after it waits behind it, though one node is free for it
    later_order, _created = instance_order(
        user=_paying_user(),
        offering_id=Offering.objects.get(name="1× H100 80GB SXM").id,
        image_id=IMAGE,
    )
    assert later_order.status == "queued"
    assert client_for(user).get(f"/api/v1/clusters/{body['id']}").json()["queue_position"] == 1
    # one node free is not enough for two ranks: nothing placed, nothing charged
    assert queue_drain(product=H100) == []
    assert _ledger(user) == before
    instance_terminate(instance_id=held.id)
    assert converge_until(converge.terminate, held.id) == "terminated"
    placed = queue_drain(product=H100)
    ranks = list(
        Instance.objects.filter(cluster_rank__cluster_id=body["id"]).order_by("cluster_rank__index")
    )
    assert placed == [ranks[0].id]
    assert [r.status for r in ranks] == ["provisioning", "provisioning"]
    assert Allocation.objects.filter(holding__instance__in=ranks).count() == 16
    later_order.refresh_from_db()
    assert later_order.status == "queued"
    # a monthly cluster pays the month of every node when it is placed, not before
    total, rows = _ledger(user)
    assert total == before[0] - 2 * _node_offering().price_per_month_fen
    assert rows == before[1] + 2


@pytest.mark.django_db(transaction=True)
def test_two_clusters_racing_for_the_same_nodes_never_split(catalog):
    users = [_paying_user() for _ in range(4)]
    offering = _node_offering()

    def order(index):
        return cluster_order(
            user=users[index], offering_id=offering.id, image_id=IMAGE, node_count=2
        )[0]

    results = run_threads(4, order)
    assert all(isinstance(found, Cluster) for found in results), results
    # placed ones start at once (their tasks run after commit): placed means not queued
    placed = [c for c in results if not c.ranks.filter(instance__status="queued").exists()]
    assert len(placed) == 1
    assert placed[0].ranks.count() == 2
    for cluster in results:
        held = Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).count()
        statuses = set(
            Instance.objects.filter(cluster_rank__cluster=cluster).values_list("status", flat=True)
        )
        assert (held, statuses == {"queued"}) in ((16, False), (0, True)), (held, statuses)
    assert Allocation.objects.count() == 16


def test_stop_start_and_terminate_move_every_rank(catalog, client_for):
    user = _paying_user()
    client = client_for(user)
    cluster = make_cluster(user)
    ranks = list(
        Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    )
    for rank in ranks:
        assert converge_until(converge.provision, rank.id) == "checking"
    assert client.get(f"/api/v1/clusters/{cluster.id}").json()["status"] == "checking"
    assert preflight_run(cluster.id) == "passed"
    assert client.get(f"/api/v1/clusters/{cluster.id}").json()["status"] == "running"
    assert client.post(f"/api/v1/clusters/{cluster.id}/stop").json()["status"] == "stopping"
    for rank in ranks:
        assert converge_until(converge.stop, rank.id) == "stopped"
    body = client.get(f"/api/v1/clusters/{cluster.id}").json()
    assert (body["status"], body["switches_spanned"]) == ("stopped", None)
    assert not Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).exists()
    started = client.post(f"/api/v1/clusters/{cluster.id}/start").json()
    assert started["status"] == "provisioning"
    assert {r["status"] for r in started["ranks"]} == {"provisioning"}
    assert Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).count() == 16
    assert client.delete(f"/api/v1/clusters/{cluster.id}").json()["status"] == "terminating"
    for rank in ranks:
        assert converge_until(converge.terminate, rank.id) == "terminated"
    assert client.get(f"/api/v1/clusters/{cluster.id}").json()["status"] == "terminated"
    assert not Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).exists()


def test_a_cluster_order_that_deadlocks_runs_again_and_makes_one_cluster(
    transactional_db, monkeypatch
):
    """PostgreSQL aborts the order's first try to break a deadlock (40P01) once all of it is
    written: the order runs again from the start (starverse.core.db.atomic_retrying) and makes
    one cluster with its ranks, once."""
    from django.db import connection

    from instances.lifecycle import gang_place_or_queue as placed

    user = _paying_user()
    tries = []

    def deadlocking(ranks, *, gang, disk_ids=None, key=None, max_wait=None):
        nodes = placed(ranks, gang=gang, disk_ids=disk_ids, key=key, max_wait=max_wait)
        # the ranks are numbered after this: their names end in their numbers
        tries.append([int(rank.name.rsplit("-", 1)[1]) for rank in ranks])
        if len(tries) == 1:
            with connection.cursor() as cursor:
                cursor.execute(
                    "DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' "
                    "USING ERRCODE = 'deadlock_detected'; END $$"
                )
        return nodes

    monkeypatch.setattr("clusters.services.gang_place_or_queue", deadlocking)
    cluster = make_cluster(user, idempotency_key="k1")

    assert tries == [[0, 1], [0, 1]]
    assert list(Cluster.objects.values_list("pk", flat=True)) == [cluster.pk]
    ranks = Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    assert list(ranks.values_list("cluster_rank__index", flat=True)) == [0, 1]
    assert Instance.objects.count() == 2
