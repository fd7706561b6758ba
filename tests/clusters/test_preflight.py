"""A cluster's pre-flight check before billing starts, on the kube emulator over HTTP (its
simulated `starverse-preflight` answers from the topology) and PostgreSQL: ranks that are up
wait unbilled in `checking`; a passed check starts every rank's billing at one moment; a node
with a bad link is cordoned, its rank moved and the check run again; a node lost while running
pauses the whole cluster's billing until the check passes again; too many failed rounds fail
the cluster, never billed; a checking cluster stops and terminates."""

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from kubernetes import client as k8s

from billing.choices import TransactionKind
from billing.models import LedgerTransaction
from clusters.models import Preflight
from clusters.preflight import bad_ranks, preflight_run, result_parse
from devstack.kube import KubeEmulator
from devstack.kube.shell import BAD_LINK
from fleet.models import Allocation, Node
from fleet.services import node_transition, nodes_sync_from_cluster
from instances.lifecycle import instances_on_node_changed
from instances.metering import metering_tick
from instances.models import Instance
from instances.provisioning import converge
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from tests.conftest import KUBE_TIMINGS
from tests.factories import converge_until, fund, make_cluster, make_user

# Six whole H100 nodes: four under h100-leaf-0, two under h100-leaf-1.
FLEET = {"h100": 6, "a100": 1}


@pytest.fixture(scope="module")
def six_node_emulator() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet=FLEET, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def fleet(six_node_emulator: KubeEmulator, tmp_path: Path, settings: Any, db: Any) -> Any:
    six_node_emulator.reset()
    settings.MAX_RUNNING_GPUS = 64
    settings.KUBECONFIG = str(six_node_emulator.write_kubeconfig(tmp_path / "kubeconfig"))
    kube._api_client.cache_clear()
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    yield six_node_emulator
    kube._api_client.cache_clear()


@pytest.fixture
def renter(db: Any) -> Any:
    user = make_user()
    fund(user, 5_000_000)
    return user


def _usage(user: Any) -> int:
    return LedgerTransaction.objects.filter(
        wallet__tenant=user.tenant, kind=TransactionKind.USAGE
    ).count()


def _ranks(cluster: Any) -> list[Instance]:
    return list(Instance.objects.filter(cluster=cluster).select_related("node").order_by("rank"))


def _node(rank: Instance) -> Node:
    assert rank.node is not None
    return rank.node


def _up(cluster: Any) -> None:
    """Every provisioning rank converged until its pod is ready: it waits in checking."""
    for rank in _ranks(cluster):
        if rank.status == "provisioning":
            assert converge_until(converge.provision, rank.id) == "checking"


def _bad_link(node_name: str) -> None:
    """Inject a bad link into a node, as an operator's test would with kubectl label."""
    api = k8s.CoreV1Api(kube._client())
    api.patch_node(node_name, {"metadata": {"labels": {BAD_LINK: "true"}}})


def _timeline(client: Any, cluster: Any) -> list[str]:
    body = client.get(f"/api/v1/clusters/{cluster.id}/events?limit=200").json()
    return [e["message"] for e in body["results"]]


def test_billing_starts_only_when_the_preflight_passes(fleet, renter, client_for):
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=3)
    _up(cluster)
    body = client.get(f"/api/v1/clusters/{cluster.id}").json()
    assert body["status"] == "checking"
    assert {r["status"] for r in body["ranks"]} == {"checking"}
    assert body["preflight"] is None
    # checking is not billed, whatever the metering tick finds
    metering_tick(now=timezone.now() + timedelta(minutes=10))
    assert _usage(renter) == 0
    assert all(rank.running_since is None for rank in _ranks(cluster))

    assert preflight_run(cluster.id) == "passed"
    assert preflight_run(cluster.id) is None  # nothing due: every rank runs
    ranks = _ranks(cluster)
    assert {rank.status for rank in ranks} == {"running"}
    assert len({rank.running_since for rank in ranks}) == 1  # one moment for all
    body = client.get(f"/api/v1/clusters/{cluster.id}").json()
    assert body["status"] == "running"
    preflight = body["preflight"]
    assert preflight["status"] == "passed" and preflight["round"] == 1
    # three H100 nodes under one leaf switch: ~370 GB/s busbw, over the seeded floor of 300
    assert 350 <= preflight["busbw_gbps"] <= 390
    assert preflight["floor_gbps"] == 300
    assert preflight["bad_nodes"] == []
    pairs = preflight["pairs"]
    for number in range(3):
        partners = {tuple(p["ranks"]) for p in pairs if number in p["ranks"]}
        assert len(partners) >= 2  # each node in two different pairs
    assert all(350 <= p["busbw_gbps"] <= 390 for p in pairs)
    assert any("Pre-flight check passed" in m for m in _timeline(client, cluster))


def test_a_bad_link_node_is_cordoned_replaced_and_the_check_passes_again(fleet, renter, client_for):
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=3)
    ranks = _ranks(cluster)
    assert {_node(rank).switch for rank in ranks} == {"h100-leaf-0"}
    bad = _node(ranks[1])
    _bad_link(bad.name)
    _up(cluster)

    assert preflight_run(cluster.id) == "failed"
    first = Preflight.objects.get(cluster=cluster, round=1)
    assert first.busbw_gbps is not None and first.busbw_gbps < 100
    assert first.bad_nodes == [{"rank": 1, "node": bad.name}]
    bad.refresh_from_db()
    assert bad.state == "cordoned" and "pre-flight" in bad.state_reason
    moved = Instance.objects.select_related("node").get(pk=ranks[1].pk)
    assert moved.status == "provisioning" and moved.rank == 1
    assert moved.node_id != bad.pk and _node(moved).switch == "h100-leaf-0"  # near the others
    assert not Allocation.objects.filter(node=bad).exists()
    assert _usage(renter) == 0
    body = client.get(f"/api/v1/clusters/{cluster.id}").json()
    assert body["preflight"]["status"] == "failed"
    assert body["preflight"]["bad_nodes"] == [{"rank": 1, "node": bad.name}]

    _up(cluster)
    assert preflight_run(cluster.id) == "passed"
    body = client.get(f"/api/v1/clusters/{cluster.id}").json()
    assert (body["status"], body["preflight"]["round"]) == ("running", 2)
    assert bad.name not in {r["node"] for r in body["ranks"]}
    timeline = _timeline(client, cluster)
    assert any("Pre-flight check failed (round 1)" in m for m in timeline)
    assert any(bad.name in m and "cordoned" in m for m in timeline)
    assert any("Pre-flight check passed (round 2)" in m for m in timeline)


def test_a_rank_with_no_free_node_waits_queued(fleet, renter, client_for):
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=6)  # the whole fleet: nowhere to move to
    bad = _node(_ranks(cluster)[4])
    _bad_link(bad.name)
    _up(cluster)
    assert preflight_run(cluster.id) == "failed"
    ranks = _ranks(cluster)
    assert ranks[4].status == "queued" and ranks[4].node_id is None
    assert client.get(f"/api/v1/clusters/{cluster.id}").json()["status"] == "queued"
    assert any("waits queued" in m for m in _timeline(client, cluster))
    assert _usage(renter) == 0


def test_a_node_lost_while_running_pauses_billing_for_every_rank(
    fleet, renter, client_for, django_capture_on_commit_callbacks
):
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=3)
    _up(cluster)
    assert preflight_run(cluster.id) == "passed"
    # five minutes of running
    Instance.objects.filter(cluster=cluster).update(
        running_since=timezone.now() - timedelta(minutes=5, seconds=10)
    )
    lost = _node(_ranks(cluster)[2])
    fleet.lose_node(lost.name)
    node_transition(node=lost, to="down", reason="heartbeat lost: no report for 61 s")
    lost_rank = _ranks(cluster)[2].pk
    assert instances_on_node_changed(node_id=lost.pk, state="down", reason="heartbeat lost") == [
        lost_rank
    ]
    ranks = _ranks(cluster)
    assert [rank.status for rank in ranks] == ["checking", "checking", "provisioning"]
    assert all(rank.running_since is None for rank in ranks)
    assert ranks[2].node_id != lost.pk
    # the closed minutes were charged, for every rank
    assert all(rank.billed_minutes == 5 for rank in ranks)
    charged = _usage(renter)
    assert charged > 0
    metering_tick(now=timezone.now() + timedelta(minutes=10))
    assert _usage(renter) == charged  # paused: nothing more while it recovers
    timeline = _timeline(client, cluster)
    assert any("billing paused for the whole cluster" in m for m in timeline)
    assert any(lost.name in m and "Placing rank 2 again" in m for m in timeline)

    _up(cluster)
    assert preflight_run(cluster.id) == "passed"
    ranks = _ranks(cluster)
    assert {rank.status for rank in ranks} == {"running"}
    assert {rank.session for rank in ranks} == {2}
    assert len({rank.running_since for rank in ranks}) == 1
    body = client.get(f"/api/v1/clusters/{cluster.id}").json()
    assert (body["status"], body["preflight"]["round"]) == ("running", 2)


def test_too_many_failed_rounds_fail_the_cluster_unbilled(fleet, renter, client_for, settings):
    settings.CLUSTER_PREFLIGHT_MAX_ROUNDS = 2
    client = client_for(renter)
    for node in Node.objects.filter(gpu_product__contains="H100"):
        _bad_link(node.name)
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    assert preflight_run(cluster.id) == "failed"
    # two nodes, one pair: the slower, else the higher rank, moves (rank 0 launches the check)
    assert Preflight.objects.get(cluster=cluster, round=1).bad_nodes[0]["rank"] == 1
    _up(cluster)
    assert preflight_run(cluster.id) == "failed"
    body = client.get(f"/api/v1/clusters/{cluster.id}").json()
    assert body["status"] == "failed" and body["cost_fen"] == 0
    assert {rank.status for rank in _ranks(cluster)} == {"failed"}
    assert "never billed" in _ranks(cluster)[0].error_message
    assert not Allocation.objects.filter(instance__cluster=cluster).exists()
    assert _usage(renter) == 0


def test_a_checking_cluster_stops_and_terminates_unbilled(fleet, renter, client_for):
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    assert client.post(f"/api/v1/clusters/{cluster.id}/stop").json()["status"] == "stopping"
    assert preflight_run(cluster.id) is None  # no longer all checking: no round
    for rank in _ranks(cluster):
        assert converge_until(converge.stop, rank.id) == "stopped"
    started = client.post(f"/api/v1/clusters/{cluster.id}/start").json()
    assert started["status"] == "provisioning"
    _up(cluster)
    assert client.delete(f"/api/v1/clusters/{cluster.id}").json()["status"] == "terminating"
    for rank in _ranks(cluster):
        assert converge_until(converge.terminate, rank.id) == "terminated"
    assert client.get(f"/api/v1/clusters/{cluster.id}").json()["status"] == "terminated"
    assert _usage(renter) == 0
    assert not Preflight.objects.filter(cluster=cluster).exists()


def test_a_round_whose_cluster_changed_meanwhile_is_abandoned(fleet, renter):
    from clusters.preflight import _round_start, round_record

    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    round_id = _round_start(cluster.id)
    assert round_id is not None
    assert _round_start(cluster.id) is None  # one round at a time
    Instance.objects.filter(cluster=cluster, rank=1).update(status="stopping")
    result = {"busbw_gbps": 370.0, "pairs": [], "per_node": []}
    assert round_record(round_id, result) == "abandoned"
    assert {rank.status for rank in _ranks(cluster)} == {"checking", "stopping"}


def test_bad_ranks_and_result_parse():
    nodes = [
        {"rank": 0, "best_gbps": 370.0},
        {"rank": 1, "best_gbps": 44.4},
        {"rank": 2, "best_gbps": 370.0},
    ]
    assert bad_ranks({"per_node": nodes}, 300.0) == [1]
    assert bad_ranks({"per_node": nodes}, None) == []
    two = [{"rank": 0, "best_gbps": 44.4}, {"rank": 1, "best_gbps": 44.4}]
    assert bad_ranks({"per_node": two}, 300.0) == [1]
    assert result_parse('noise\n{"busbw_gbps": 362.6, "pairs": []}\n') == {
        "busbw_gbps": 362.6,
        "pairs": [],
    }
    assert result_parse("Traceback: boom") is None
    assert result_parse('{"busbw_gbps": "fast"}') is None


def test_a_rank_whose_pod_vanished_is_checked_again_with_the_whole_cluster(fleet, renter):
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    assert preflight_run(cluster.id) == "passed"
    gone = _ranks(cluster)[1]
    assert kube.delete("Pod", gone.k8s_namespace, gone.k8s_name, force=True)
    assert reconcile().recreated == [gone.pk]
    assert [rank.status for rank in _ranks(cluster)] == ["running", "provisioning"]
    _up(cluster)
    assert [rank.status for rank in _ranks(cluster)] == ["running", "checking"]
    # the round pauses rank 0's billing first: the cluster runs only as a whole
    assert preflight_run(cluster.id) == "passed"
    ranks = _ranks(cluster)
    assert {rank.status for rank in ranks} == {"running"}
    assert {rank.session for rank in ranks} == {2}
    assert len({rank.running_since for rank in ranks}) == 1
    assert ranks[0].events.filter(message__contains="came up again").exists()
