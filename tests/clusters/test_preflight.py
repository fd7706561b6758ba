"""A cluster's pre-flight check before billing starts, on the kube emulator over HTTP (its
simulated `starverse-preflight` answers from the topology) and PostgreSQL: ranks that are up
wait unbilled in `checking`; a passed check starts every rank's billing at one moment; a node
with a bad link has its rank moved and is put up for review, and the check runs again; a node
lost while running pauses the whole cluster's billing until the check passes again; too many
failed rounds fail the cluster, never billed; a checking cluster stops and terminates.

The check runs in the tenant's container, where the tenant is root: the emulator's
`replace_program` stands in for a tenant who replaced it. A forged result cordons no node unless
the node's agent agrees; a check that hangs or prints no result is a failed round; a cluster
checking too long fails and frees its GPUs; a rank is never stopped, started or terminated
alone through /instances."""

import json
import time
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
from clusters.models import Cluster, Preflight
from clusters.preflight import bad_ranks, preflight_run, result_parse
from compute.models import Allocation
from devstack.kube import KubeEmulator
from devstack.kube.shell import BAD_LINK
from fleet.models import Node
from fleet.services import node_token_issue, node_transition, nodes_sync_from_cluster
from instances.lifecycle import instances_on_node_changed
from instances.metering import metering_tick
from instances.models import Instance
from instances.provisioning import converge
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from tests.conftest import KUBE_TIMINGS
from tests.factories import (
    converge_until,
    fund,
    make_cluster,
    make_disk,
    make_user,
    running_since,
)

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
    return list(
        Instance.objects.filter(cluster_rank__cluster=cluster)
        .select_related("node")
        .order_by("cluster_rank__index")
    )


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


def test_a_bad_link_node_is_replaced_put_up_for_review_and_the_check_passes_again(
    fleet, renter, client_for
):
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
    # the tenant's container said so, and its node agent did not: in service, for an operator
    assert (bad.state, bad.review_since is not None) == ("ready", True)
    assert "pre-flight" in bad.review_reason
    moved = Instance.objects.select_related("node").get(pk=ranks[1].pk)
    assert moved.status == "provisioning" and moved.cluster_rank.index == 1
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
    assert (
        f"Its node {bad.name} was slow in the pre-flight check; moving rank 1 to another node."
        in (timeline)
    )
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
    rank_ids = [rank.pk for rank in _ranks(cluster)]
    running_since(rank_ids, timezone.now() - timedelta(minutes=5, seconds=10))
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
    posted = LedgerTransaction.objects.filter(kind=TransactionKind.USAGE, instance_id__in=rank_ids)
    assert sorted(posted.values_list("instance_id", "minutes")) == [
        (r, 5) for r in sorted(rank_ids)
    ]
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
    assert not Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).exists()
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
    found = _round_start(cluster.id)
    assert found is not None
    assert _round_start(cluster.id) is None  # one round at a time
    Instance.objects.filter(cluster_rank__cluster=cluster, cluster_rank__index=1).update(
        status="stopping"
    )
    result = {"busbw_gbps": 370.0, "pairs": [], "per_node": []}
    assert round_record(found.pk, result) == "abandoned"
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
    assert result_parse('noise\n{"busbw_gbps": 362.6, "pairs": []}\n', nodes=2) == {
        "busbw_gbps": 362.6,
        "per_node": [],
        "pairs": [],
    }
    pair = {"round": 1, "ranks": [0, 1], "hosts": ["a", "b"], "busbw_gbps": 370, "extra": "x"}
    assert result_parse(json.dumps({"busbw_gbps": 370, "pairs": [pair]}), nodes=2) == {
        "busbw_gbps": 370.0,
        "per_node": [],
        "pairs": [{"round": 1, "ranks": [0, 1], "hosts": ["a", "b"], "busbw_gbps": 370.0}],
    }
    assert result_parse("Traceback: boom", nodes=2) is None
    # what the tenant's container printed is read as data of one shape, nothing else
    for wrong in (
        {"busbw_gbps": "fast"},
        {"busbw_gbps": float("nan")},
        {"busbw_gbps": -1},
        {"busbw_gbps": True},
        {"busbw_gbps": 370, "per_node": [{"rank": 2, "best_gbps": 10}]},  # no rank 2
        {"busbw_gbps": 370, "per_node": [{"rank": 1, "best_gbps": 1}] * 2},  # rank 1 twice
        {"busbw_gbps": 370, "per_node": [{"rank": "1", "best_gbps": 1}]},
        {"busbw_gbps": 370, "per_node": "all good"},
        {"busbw_gbps": 370, "pairs": [{"round": 1, "ranks": [0, 0], "busbw_gbps": 1}]},
        {"busbw_gbps": 370, "pairs": [{"ranks": [0, 1]}]},
    ):
        assert result_parse(json.dumps(wrong), nodes=2) is None, wrong


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


# --- the check runs in the tenant's container -------------------------------------------------

PROGRAM = "/opt/starverse/bin/starverse-preflight"


def _tamper(fleet: KubeEmulator, cluster: Any, path: str = PROGRAM, **program: Any) -> None:
    """The tenant, root in rank 0's container, replaced the program at `path`."""
    head = _ranks(cluster)[0]
    fleet.replace_program(head.k8s_namespace, head.k8s_name, path, **program)


def _forged(per_node: dict[int, float]) -> str:
    """A result a tenant made up: every named rank at its bandwidth, the slowest overall."""
    nodes = [{"rank": rank, "best_gbps": gbps} for rank, gbps in per_node.items()]
    return json.dumps({"busbw_gbps": min(per_node.values()), "pairs": [], "per_node": nodes}) + "\n"


def _agent_reports_xid(api: Any, node: Node, xid: int) -> None:
    """The node's agent reports an XID, over the agent API with the node's own token."""
    token = node_token_issue(node=node)
    event = {"at": timezone.now().isoformat(), "type": "xid", "gpu": 3, "xid": xid}
    body = {"node": node.name, "driver": {}, "samples": [], "events": [event]}
    answer = api.post(
        f"/api/v1/nodes/{node.name}/report",
        body,
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 202, answer.content


def test_a_forged_result_moves_the_ranks_but_takes_no_node_out_of_service(
    fleet, renter, client_for
):
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=3)
    _up(cluster)
    blamed = [_node(rank) for rank in _ranks(cluster)[1:]]
    _tamper(fleet, cluster, prints=_forged({0: 370.0, 1: 9.5, 2: 9.5}))

    assert preflight_run(cluster.id) == "failed"
    assert Preflight.objects.get(cluster=cluster, round=1).bad_nodes == [
        {"rank": 1, "node": blamed[0].name},
        {"rank": 2, "node": blamed[1].name},
    ]
    for node in blamed:
        node.refresh_from_db()
        assert (node.state, node.state_reason, node.schedulable) == ("ready", "", True)
        assert node.review_since is not None
        assert "as measured in the tenant's container" in node.review_reason
        assert "its node agent reported nothing wrong" in node.review_reason
        changes = node.events.filter(kind__in=["state", "review"])  # no state change: a review
        assert list(changes.values_list("kind", flat=True)) == ["review"]
        assert not Allocation.objects.filter(node=node).exists()
    ranks = _ranks(cluster)
    assert [rank.status for rank in ranks] == ["checking", "provisioning", "provisioning"]
    assert not {rank.node_id for rank in ranks} & {node.pk for node in blamed}
    assert _usage(renter) == 0
    timeline = _timeline(client, cluster)
    assert not any("cordoned" in m for m in timeline)
    # the blamed nodes still take orders: another tenant's cluster is placed on them
    other = make_cluster(make_user(), node_count=2)
    assert {rank.node_id for rank in _ranks(other)} == {node.pk for node in blamed}


def test_a_forged_result_cordons_a_node_its_agent_reported_a_fault_on(
    fleet, renter, api, client_for
):
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    faulty = _node(_ranks(cluster)[1])
    _agent_reports_xid(api, faulty, 92)  # a high single-bit ECC rate: no rule cordons on it
    faulty.refresh_from_db()
    assert faulty.state == "ready"
    _tamper(fleet, cluster, prints=_forged({0: 370.0, 1: 9.5}))

    assert preflight_run(cluster.id) == "failed"
    faulty.refresh_from_db()
    assert faulty.state == "cordoned" and faulty.review_since is None
    assert "as measured in the tenant's container" in faulty.state_reason
    assert "its node agent agrees: XID 92" in faulty.state_reason
    moved = _ranks(cluster)[1]
    assert moved.status == "provisioning" and moved.node_id != faulty.pk
    assert (
        f"Its node {faulty.name} was slow in the pre-flight check and was cordoned; moving rank "
        "1 to another node."
    ) in _timeline(client, cluster)


def test_a_program_earlier_on_the_path_does_not_stand_in_for_the_check(fleet, renter):
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    _tamper(fleet, cluster, "/usr/local/sbin/starverse-preflight", prints=_forged({0: 1, 1: 1}))

    assert preflight_run(cluster.id) == "passed"
    found = Preflight.objects.get(cluster=cluster, round=1)
    assert found.busbw_gbps is not None and 350 <= found.busbw_gbps <= 390  # the real one's


def test_a_check_that_hangs_is_a_failed_round(fleet, renter, settings):
    settings.CLUSTER_PREFLIGHT_TIMEOUT_S = 1
    settings.CLUSTER_PREFLIGHT_MAX_ROUNDS = 2
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    nodes = [rank.node_id for rank in _ranks(cluster)]
    _tamper(fleet, cluster, hangs=True)

    assert preflight_run(cluster.id) == "failed"
    first = Preflight.objects.get(cluster=cluster, round=1)
    assert (first.busbw_gbps, first.bad_nodes) == (None, [])
    assert first.message == (
        "Pre-flight check round 1 failed: no result within 1 s. It counts as a failed round."
    )
    # no node named: the same nodes, unblamed, check again
    assert [(rank.status, rank.node_id) for rank in _ranks(cluster)] == [
        ("checking", nodes[0]),
        ("checking", nodes[1]),
    ]
    assert not Node.objects.filter(review_since__isnull=False).exists()

    assert preflight_run(cluster.id) == "failed"  # the last round allowed
    assert {rank.status for rank in _ranks(cluster)} == {"failed"}
    assert "failed its pre-flight check 2 times in a row" in _ranks(cluster)[0].error_message
    assert not Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).exists()
    assert _usage(renter) == 0


def test_a_check_that_prints_no_result_is_a_failed_round(fleet, renter, settings):
    settings.CLUSTER_PREFLIGHT_MAX_ROUNDS = 5
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    outputs: list[tuple[dict[str, Any], str]] = [
        # a rank the cluster does not have, at a bandwidth below any floor
        ({"prints": _forged({0: 370.0, 7: 1.0})}, "what it printed is not a pre-flight result"),
        ({"prints": '{"busbw_gbps": NaN}\n'}, "what it printed is not a pre-flight result"),
        (
            {"prints": "Traceback: boom\n", "exit_code": 1},
            "it exited with code 1 (Traceback: boom)",
        ),
    ]
    for number, (program, said) in enumerate(outputs, start=1):
        _tamper(fleet, cluster, **program)
        assert preflight_run(cluster.id) == "failed"
        found = Preflight.objects.get(cluster=cluster, round=number)
        assert (found.status, found.busbw_gbps, found.bad_nodes) == ("failed", None, [])
        assert said in found.message
    assert {rank.status for rank in _ranks(cluster)} == {"checking"}
    assert not Node.objects.filter(review_since__isnull=False).exists()
    assert _usage(renter) == 0


def test_a_cluster_checking_too_long_fails_and_frees_its_gpus(fleet, renter, client_for):
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=6)  # the whole fleet: a moved rank waits queued
    _bad_link(_node(_ranks(cluster)[4]).name)
    _up(cluster)
    assert preflight_run(cluster.id) == "failed"
    assert [rank.status for rank in _ranks(cluster)].count("checking") == 5
    began = Cluster.objects.get(pk=cluster.pk).checking_since
    assert began == Preflight.objects.get(cluster=cluster, round=1).started_at

    # 29 minutes in: still waiting, nothing due
    Cluster.objects.filter(pk=cluster.pk).update(checking_since=began - timedelta(minutes=29))
    assert preflight_run(cluster.id) is None
    assert [rank.status for rank in _ranks(cluster)].count("checking") == 5
    # past CLUSTER_CHECKING_MAX_MINUTES (30) in all: failed, every GPU given back
    Cluster.objects.filter(pk=cluster.pk).update(checking_since=began - timedelta(minutes=31))
    assert preflight_run(cluster.id) is None
    ranks = _ranks(cluster)
    assert {rank.status for rank in ranks} == {"failed"}
    assert ranks[0].error_message == (
        "The cluster's pre-flight check did not pass within 30 minutes. It was never billed; "
        "its nodes are free again. Start it again or contact support."
    )
    assert not Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).exists()
    assert client.get(f"/api/v1/clusters/{cluster.id}").json()["cost_fen"] == 0
    assert _usage(renter) == 0


def test_abandoned_rounds_cannot_keep_a_cluster_checking(fleet, renter):
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    fleet.inject_api_fault(status=500, count=1, verb="create", resource="pods/exec")
    with pytest.raises(kube.RetryableKubeError):
        preflight_run(cluster.id)  # the platform's API failed it: abandoned, not counted
    assert Preflight.objects.get(cluster=cluster, round=1).status == "abandoned"
    began = Cluster.objects.get(pk=cluster.pk).checking_since
    assert began is not None
    Cluster.objects.filter(pk=cluster.pk).update(checking_since=began - timedelta(minutes=31))

    assert preflight_run(cluster.id) is None
    assert {rank.status for rank in _ranks(cluster)} == {"failed"}
    assert Preflight.objects.filter(cluster=cluster).count() == 1  # no round sent again
    assert not Allocation.objects.filter(holding__instance__cluster_rank__cluster=cluster).exists()


def test_a_round_whose_worker_was_killed_is_taken_over_and_the_cluster_runs(
    fleet, renter, settings, django_capture_on_commit_callbacks
):
    """The chaos drill's `worker kill -9 mid-pre-flight`: the worker began round 1 (its row
    and the timeline's line committed) and died while the check ran, so nobody records it. The
    reconcile loop hands the check out again; the next worker takes the round over once its
    lease ran out (not after the exec's timeout) and the cluster runs."""
    from clusters import preflight
    from clusters.preflight import _round_start, round_record

    settings.CLUSTER_PREFLIGHT_LEASE_S = 1
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    lost = _round_start(cluster.id)  # all a worker killed mid-check leaves behind
    assert lost is not None
    assert preflight_run(cluster.id) is None  # its lease runs: it may be alive, one at a time
    time.sleep(1.5)  # the dead worker renews nothing: the lease runs out

    stuck = timezone.now() + timedelta(seconds=settings.RECONCILE_STUCK_AFTER_S + 1)
    with django_capture_on_commit_callbacks(execute=True):
        report = reconcile(now=stuck)  # the check handed out again, run at once (eager)
    assert set(report.requeued) <= {rank.pk for rank in _ranks(cluster)}  # once a cluster
    assert len(report.requeued) == 1
    rounds = Preflight.objects.filter(cluster=cluster).order_by("round")
    assert [(found.round, found.status) for found in rounds] == [(1, "abandoned"), (2, "passed")]
    assert {rank.status for rank in _ranks(cluster)} == {"running"}
    # were the killed worker's round to come back, it could neither renew nor be recorded
    assert not preflight.round_lease_renew(lost.pk)
    result = {"busbw_gbps": 370.0, "pairs": [], "per_node": []}
    assert round_record(lost.pk, result) == "abandoned"


def test_a_round_that_runs_long_keeps_its_lease(fleet, renter, settings):
    """A live worker renews its round's lease while the check runs: a check that takes longer
    than the lease is not taken over by another worker meanwhile."""
    settings.CLUSTER_PREFLIGHT_LEASE_S = 1
    settings.CLUSTER_PREFLIGHT_TIMEOUT_S = 3
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    _tamper(fleet, cluster, hangs=True)
    assert preflight_run(cluster.id) == "failed"  # no result within 3 s
    found = Preflight.objects.get(cluster=cluster, round=1)
    assert found.lease_until is not None
    # renewed every third of a second until the timeout, not left at started + 1 s
    assert found.lease_until - found.started_at > timedelta(seconds=2.5)


def test_a_started_cluster_checks_afresh(fleet, renter, client_for, settings):
    settings.CLUSTER_PREFLIGHT_MAX_ROUNDS = 2
    client = client_for(renter)
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    _tamper(fleet, cluster, prints="no result\n")
    assert [preflight_run(cluster.id), preflight_run(cluster.id)] == ["failed", "failed"]
    assert {rank.status for rank in _ranks(cluster)} == {"failed"}

    assert client.post(f"/api/v1/clusters/{cluster.id}/start").status_code == 202
    assert Cluster.objects.get(pk=cluster.pk).checking_since is None
    _up(cluster)  # new pods: the tenant's changes are gone with the old ones
    _tamper(fleet, cluster, prints="no result\n")
    assert preflight_run(cluster.id) == "failed"  # one failed round of two allowed, afresh
    assert {rank.status for rank in _ranks(cluster)} == {"checking"}


# --- a rank acts only with its cluster ----------------------------------------------------------


def _state(cluster: Any) -> list[tuple[str, str | None, int]]:
    return [(rank.status, rank.node_id, rank.events.count()) for rank in _ranks(cluster)]


def test_a_rank_is_not_stopped_started_or_terminated_alone(fleet, renter, client_for, client):
    api = client_for(renter)
    client.force_login(renter)
    cluster = make_cluster(renter, node_count=2)
    _up(cluster)
    assert preflight_run(cluster.id) == "passed"
    rank = _ranks(cluster)[1]
    before = _state(cluster)
    said = (
        f"This instance is rank 1 of the cluster {cluster.id}, and a cluster stops, starts and "
        "terminates as a whole: do it on the cluster instead."
    )

    for method, path in (("post", "stop"), ("delete", "")):
        answer = getattr(api, method)(f"/api/v1/instances/{rank.id}/{path}".rstrip("/"))
        assert (answer.status_code, answer.json()) == (
            409,
            {"detail": said, "code": "cluster_rank"},
        )
    for path in ("stop", "terminate"):
        page = client.post(f"/console/instances/{rank.id}/{path}/", follow=True)
        assert said in page.content.decode()
    disk = make_disk(renter)
    attach = api.post(
        f"/api/v1/instances/{rank.id}/disks", {"disk": disk.id, "restart": True}, format="json"
    )
    assert (attach.status_code, attach.json()["code"]) == (409, "cluster_rank")
    assert _state(cluster) == before
    assert Preflight.objects.filter(cluster=cluster).count() == 1

    # the cluster as a whole stops, starts and terminates
    assert api.post(f"/api/v1/clusters/{cluster.id}/stop").json()["status"] == "stopping"
    for each in _ranks(cluster):
        assert converge_until(converge.stop, each.id) == "stopped"
    answer = api.post(f"/api/v1/instances/{rank.id}/start")
    assert (answer.status_code, answer.json()) == (409, {"detail": said, "code": "cluster_rank"})
    page = client.post(f"/console/instances/{rank.id}/start/", follow=True)
    assert said in page.content.decode()
    assert {status for status, _node, _events in _state(cluster)} == {"stopped"}
    assert api.post(f"/api/v1/clusters/{cluster.id}/start").json()["status"] == "provisioning"
    assert api.delete(f"/api/v1/clusters/{cluster.id}").json()["status"] == "terminating"
    assert {each.status for each in _ranks(cluster)} == {"terminating"}
