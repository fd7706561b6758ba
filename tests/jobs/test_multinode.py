"""Multi-node jobs end to end on the Kubernetes emulator (four whole H100 nodes): a job of N
nodes owns a cluster (one gang, its pre-flight check, its environment and hostfiles); each
rank's program waits for its gate until the pre-flight passed; a lost node pauses billing for
the whole job, re-places only the lost rank (the healthy one stays on its node) and starts
every rank's program again with STARVERSE_RESTART_COUNT + 1, resuming from its checkpoint; a
rank's non-zero exit is the user's error (run again by the policy, then failed with its code
and lines); the job's cluster is not one of the user's clusters."""

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing.choices import TransactionKind
from billing.models import LedgerTransaction
from clusters.gates import GATE_FILE, gates_lost_hand_out
from clusters.models import Preflight
from clusters.preflight import preflight_run
from clusters.tasks import reconcile_clusters
from compute.models import Holding, Offering
from devstack.kube.emulator import KubeEmulator
from fleet.liveness import CHECK_S, node_leases_follow
from fleet.models import DEFAULT_REGION, Node, NodeEvent
from fleet.services import node_transition, nodes_sync_from_cluster
from instances.lifecycle import instances_on_node_changed
from instances.metering import metering_tick
from instances.models import Instance
from instances.provisioning import converge
from instances.provisioning.logs import logs_ship
from instances.provisioning.reconcile import reconcile, workloads_check
from jobs.models import Job, JobEvent
from jobs.recovery import rank_restart
from jobs.services import job_sync
from starverse.core import kube
from tests.conftest import KUBE_TIMINGS
from tests.factories import (
    WHOLE_NODE,
    converge_until,
    fund,
    make_user,
    read_existing,
    running_since,
)

WAIT_S = 20
IMAGE = "pytorch-2.1"


@pytest.fixture(scope="module")
def four_nodes() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet={"h100": 4, "a100": 1}, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def fleet(four_nodes: KubeEmulator, db: Any, settings: Any, tmp_path: Path) -> Iterator[Any]:
    four_nodes.reset()
    settings.MAX_RUNNING_GPUS = 64
    settings.KUBECONFIG = str(four_nodes.write_kubeconfig(tmp_path / "kubeconfig"))
    kube._api_client.cache_clear()
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    yield four_nodes
    kube._api_client.cache_clear()


@pytest.fixture
def owner(db: Any) -> Any:
    user = make_user()
    fund(user, 10_000_000)
    return user


def _trainer(steps: int, *, fail_at: int | None = None, code: int = 1) -> str:
    flags = f" --fail-at {fail_at} --exit-code {code}" if fail_at else ""
    return f"starverse-sim-train --steps {steps} --step-seconds 0.05{flags}"


def _submit(client: Any, **body: Any) -> Any:
    offering = Offering.objects.get(name=WHOLE_NODE)
    data = {"offering": offering.id, "image": IMAGE, "nas": False, "node_count": 2, **body}
    return client.post("/api/v1/jobs", data, format="json")


def _job(client: Any, **body: Any) -> Job:
    answer = _submit(client, **body)
    assert answer.status_code == 202, answer.json()
    assert answer.json()["node_count"] == body.get("node_count", 2)
    return Job.objects.get(pk=answer.json()["id"])


def _ranks(job: Job) -> list[Instance]:
    return list(
        Instance.objects.filter(job_rank__job=job)
        .select_related("node")
        .order_by("job_rank__index")
    )


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def _log(instance: Instance) -> str:
    instance.refresh_from_db()
    return kube.pod_log(instance.k8s_namespace, instance.k8s_name)


def _log_has(instance: Instance, text: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while text not in (log := _log(instance)):
        assert time.monotonic() < deadline, log
        time.sleep(0.05)
    return log


def _up_and_checked(job: Job, capture: Any) -> list[Instance]:
    """Every rank's pod up (checking, unbilled), then the pre-flight round, which passes and
    opens every rank's gate (the tasks run here)."""
    for rank in _ranks(job):
        assert converge_until(converge.provision, rank.id) == "checking"
    job.refresh_from_db()
    assert job.cluster_id is not None
    with capture(execute=True):
        assert preflight_run(job.cluster_id) == "passed"
    return _ranks(job)


def _up_committed(job: Job) -> list[Instance]:
    """_up_and_checked where every commit is real (a transactional test): what each commit
    sends runs at once, the pre-flight round too once the last rank is up."""
    for rank in _ranks(job):
        assert converge_until(converge.provision, rank.id) in ("checking", "running")
    job.refresh_from_db()
    assert job.cluster_id is not None
    if any(rank.status == "checking" for rank in _ranks(job)):
        assert preflight_run(job.cluster_id) == "passed"
    assert {rank.status for rank in _ranks(job)} == {"running"}
    return _ranks(job)


def _programs_end(ranks: list[Instance]) -> None:
    deadline = time.monotonic() + WAIT_S
    for rank in ranks:
        while read_existing("Pod", rank.k8s_namespace, rank.k8s_name)["status"].get(
            "phase"
        ) not in ("Succeeded", "Failed"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert sorted(workloads_check()) == sorted(rank.id for rank in ranks)


def test_a_2_node_deepspeed_job_starts_after_its_preflight_and_succeeds(
    fleet, client_for, owner, django_capture_on_commit_callbacks
):
    client = client_for(owner)
    job = _job(client, template="deepspeed", command=_trainer(4), env={"LR": "1e-4"})
    ranks = _ranks(job)
    assert len(ranks) == 2 and job.status == "provisioning"
    assert len({rank.node_id for rank in ranks}) == 2  # one whole node each, as one gang
    for rank in ranks:
        assert converge_until(converge.provision, rank.id) == "checking"
    dns = job.id.lower().replace("_", "-")
    for index, rank in enumerate(_ranks(job)):
        pod = read_existing("Pod", rank.k8s_namespace, rank.k8s_name)
        assert pod["metadata"]["labels"]["starverse.io/job"] == dns
        env = _env(pod)
        assert env["STARVERSE_JOB_ID"] == job.id
        assert env["STARVERSE_RESTART_COUNT"] == "0"
        assert env["STARVERSE_CHECKPOINT_DIR"] == job.checkpoint_dir
        assert (env["NODE_RANK"], env["NNODES"], env["WORLD_SIZE"]) == (str(index), "2", "16")
        assert env["STARVERSE_GATE"] == GATE_FILE and env["LR"] == "1e-4"
        program = pod["spec"]["containers"][0]["args"][-1]
        assert program.startswith('deepspeed --no_ssh --node_rank="$NODE_RANK"')
        assert program.endswith('--checkpoint-dir "$STARVERSE_CHECKPOINT_DIR"')
        # the gate is closed: the program waits, whatever time passes
        _log_has(rank, f"waiting for {GATE_FILE}")
    time.sleep(0.3)
    assert all("step 1/" not in _log(rank) for rank in ranks)
    assert job_sync(job.id) == "provisioning"

    ranks = _up_and_checked(job, django_capture_on_commit_callbacks)
    assert job_sync(job.id) == "running"
    # a rank acts only through its job (named), not as its cluster's rank
    answer = client.post(f"/api/v1/instances/{ranks[1].id}/stop")
    assert (answer.status_code, answer.json()["code"]) == (409, "job_rank")
    assert job.id in answer.json()["detail"]
    for rank in ranks:
        assert "starting at step 0" in _log_has(rank, "step 1/4")
    _programs_end(ranks)
    with django_capture_on_commit_callbacks(execute=True):
        assert job_sync(job.id) == "succeeded"
    job.refresh_from_db()
    assert job.exit_code == 0 and job.restarts == 0
    assert {rank.status for rank in _ranks(job)} <= {"terminating", "terminated"}
    shown = client.get(f"/api/v1/jobs/{job.id}").json()
    assert [(r["rank"], r["node"]) for r in shown["ranks"]] == [
        (rank.job_rank.index, rank.node.name if rank.node else None) for rank in ranks
    ]
    assert shown["cost_fen"] == sum(rank.cost_fen for rank in _ranks(job)) > 0
    # the job's cluster is the job's: not among the user's clusters, not acted on there
    assert client.get(f"/api/v1/clusters/{job.cluster_id}").status_code == 404
    assert client.get("/api/v1/clusters").json()["results"] == []


def test_a_gate_opening_lost_with_its_worker_is_sent_again_and_the_programs_start(
    fleet, client_for, owner, django_capture_on_commit_callbacks, settings
):
    """The task that opens the gates once the pre-flight passed was lost (the worker killed
    with it, the broker flushed; the chaos drill found such a job running, its ranks billed and
    their programs waiting for good): the clusters' reconcile pass sends it again once the
    round passed RECONCILE_STUCK_AFTER_S ago, and the programs start."""
    assert settings.CELERY_BEAT_SCHEDULE["clusters-reconcile"]["task"] == (
        "clusters.tasks.reconcile_clusters"
    )
    job = _job(client_for(owner), command=_trainer(3))
    for rank in _ranks(job):
        assert converge_until(converge.provision, rank.id) == "checking"
    job.refresh_from_db()
    assert job.cluster_id is not None
    with django_capture_on_commit_callbacks(execute=False):  # what the round sends is lost
        assert preflight_run(job.cluster_id) == "passed"
    ranks = _ranks(job)
    assert {rank.status for rank in ranks} == {"running"}  # billed from now on
    assert job_sync(job.id) == "running"
    for rank in ranks:
        _log_has(rank, f"waiting for {GATE_FILE}")
    # a round that passed just now may have its task on its way: nothing is sent yet
    with django_capture_on_commit_callbacks(execute=True):
        assert gates_lost_hand_out() == []
    time.sleep(0.3)
    assert all("step 1/" not in _log(rank) for rank in ranks)

    settings.RECONCILE_STUCK_AFTER_S = 0
    with django_capture_on_commit_callbacks(execute=True):
        reconcile_clusters()
    for rank in ranks:
        _log_has(rank, "step 1/3")
    passed = Preflight.objects.get(cluster_id=job.cluster_id, status="passed")
    assert passed.gates_opened_at is not None
    with django_capture_on_commit_callbacks(execute=True):
        assert gates_lost_hand_out() == []  # opened: sent no more
    _programs_end(ranks)
    with django_capture_on_commit_callbacks(execute=True):
        assert job_sync(job.id) == "succeeded"


def test_a_lost_node_pauses_billing_replaces_only_its_rank_and_every_rank_resumes(
    fleet, client_for, owner, django_capture_on_commit_callbacks
):
    job = _job(client_for(owner), command=_trainer(2000), template="torchrun")
    ranks = _up_and_checked(job, django_capture_on_commit_callbacks)
    assert job_sync(job.id) == "running"
    for rank in ranks:
        _log_has(rank, "step 6/")
    healthy, lost = ranks
    assert lost.node is not None and healthy.node is not None

    fleet.lose_node(lost.node.name)
    # the node's loss told to its instances (its task's work, run here; what that sends after
    # commit, the provisioning of the ranks, is done step by step below)
    with django_capture_on_commit_callbacks(execute=False):
        node_transition(node=lost.node, to="down", reason="heartbeat lost")
        instances_on_node_changed(node_id=lost.node.pk, state="down", reason="heartbeat lost")
    assert job_sync(job.id) == "recovering"
    after = {rank.pk: rank for rank in _ranks(job)}
    # billing paused for every rank; the healthy one keeps its node, the lost one moves
    assert all(rank.running_since is None for rank in after.values())
    assert after[healthy.pk].node_id == healthy.node_id
    assert after[lost.pk].node_id not in (None, lost.node_id)

    ranks = _up_and_checked(job, django_capture_on_commit_callbacks)
    assert job_sync(job.id) == "running"
    job.refresh_from_db()
    assert (job.restarts, job.error_restarts) == (1, 0)
    for rank in ranks:
        log = _log_has(rank, "resumed from step")
        assert int(log.split("resumed from step", 1)[1].split()[0]) >= 6
        assert "STARVERSE_RESTART_COUNT=1" in log
    assert ranks[0].node_id == healthy.node_id
    assert job.error_nodes == {}  # down already: the platform's own signal, no review asked
    events = client_for(owner).get(f"/api/v1/jobs/{job.id}/events").json()["results"]
    assert [e["status"] for e in events][-2:] == ["recovering", "running"]
    assert events[-2]["text"].startswith(f"Rank 1 lost its node {lost.node.name} (heartbeat")

    # both ranks' new attempts say where they resumed: one timeline line for the attempt, rank 0's
    assert logs_ship() == 2
    step = int(_log_has(ranks[0], "resumed from step").split("resumed from step", 1)[1].split()[0])
    assert job_sync(job.id) == job_sync(job.id) == "running"
    events = client_for(owner).get(f"/api/v1/jobs/{job.id}/events").json()["results"]
    resumed = [e for e in events if e["text"].startswith("Resumed from")]
    assert [e["text"] for e in resumed] == [f"Resumed from step {step} (restart 1)."]


def test_a_lost_node_is_found_in_seconds_by_its_lease_and_the_job_resumes_unbilled_meanwhile(
    fleet, transactional_db, client_for, owner, settings
):
    """The node lease watch (fleet.liveness), not the 60 s heartbeat rule, takes the lost node
    down within the lease's quiet time (its kubelet and agent stopped); the job recovers
    through its one path, billed only its running minutes, and resumes from its checkpoint."""
    job = _job(client_for(owner), command=_trainer(4000), template="torchrun")
    ranks = _up_committed(job)
    assert job_sync(job.id) == "running"
    for rank in ranks:
        _log_has(rank, "step 6/")
    rank_ids = [rank.pk for rank in ranks]
    running_since(rank_ids, timezone.now() - timedelta(minutes=5, seconds=10))
    healthy, lost = ranks
    assert lost.node is not None
    # its agent reported (then stops with the kubelet): the lease alone does not decide
    Node.objects.filter(pk=lost.node_id).update(last_report_at=timezone.now())
    stop = threading.Event()
    follower = threading.Thread(
        target=node_leases_follow, kwargs={"region": DEFAULT_REGION, "stop": stop}
    )
    follower.start()
    try:
        time.sleep(CHECK_S)  # the watch has listed the leases (a long-running process)
        fleet.lose_node(lost.node.name)
        lost_at, paused = time.monotonic(), timezone.now()
        bound = settings.NODE_LEASE_QUIET_S + 2 * CHECK_S + 5  # well under the 60 s rule
        while Node.objects.get(pk=lost.node_id).state != "down":
            assert time.monotonic() - lost_at < bound, "not found by the lease watch"
            time.sleep(0.1)
    finally:
        stop.set()
        follower.join()
    event = NodeEvent.objects.filter(node_id=lost.node_id, kind="heartbeat").get()
    assert "lease not renewed" in event.message and "node lease watch" in event.message
    assert Node.objects.get(pk=healthy.node_id).state == "ready"

    # the node's loss told its ranks at once (every commit's tasks ran in the watch's thread):
    # billing paused for the whole job, the lost rank placed again, the healthy one kept
    ranks = _up_committed(job)
    assert job_sync(job.id) == "running"
    job.refresh_from_db()
    assert (job.restarts, job.error_restarts) == (1, 0)
    events = client_for(owner).get(f"/api/v1/jobs/{job.id}/events").json()["results"]
    assert [e["status"] for e in events][-2:] == ["recovering", "running"]
    assert ranks[0].node_id == healthy.node_id
    assert ranks[1].node_id not in (None, lost.node_id)
    # billed: the five closed minutes before the loss, for each rank, then again only from
    # the moment every rank ran again
    usage = LedgerTransaction.objects.filter(kind=TransactionKind.USAGE, instance_id__in=rank_ids)
    assert sorted(usage.values_list("instance_id", "minutes")) == [(r, 5) for r in sorted(rank_ids)]
    assert all(rank.running_since is not None and rank.running_since > paused for rank in ranks)
    metering_tick(now=paused + timedelta(seconds=50))
    assert usage.count() == 2  # not a minute more for the time it recovered
    for rank in ranks:
        log = _log_has(rank, "resumed from step")
        assert int(log.split("resumed from step", 1)[1].split()[0]) >= 6
        assert "STARVERSE_RESTART_COUNT=1" in log


def test_a_ranks_error_runs_every_rank_again_by_the_policy_then_fails_with_its_code(
    fleet, client_for, owner, django_capture_on_commit_callbacks
):
    job = _job(client_for(owner), command=_trainer(50, fail_at=3, code=7), max_restarts=1)
    ranks = _up_and_checked(job, django_capture_on_commit_callbacks)
    assert job_sync(job.id) == "running"
    _programs_end(ranks)
    with django_capture_on_commit_callbacks(execute=True):
        assert job_sync(job.id) == "recovering"
    job.refresh_from_db()
    assert (job.error_restarts, job.restart_pending) == (1, True)
    for rank in _ranks(job):
        assert converge_until(converge.stop, rank.id) == "stopped"
    with django_capture_on_commit_callbacks(execute=False):
        rank_restart(ranks[0].id)  # its task: every rank stopped, all start again as one
    assert {rank.status for rank in _ranks(job)} == {"provisioning"}

    ranks = _up_and_checked(job, django_capture_on_commit_callbacks)
    assert job_sync(job.id) == "running"
    for rank in ranks:
        assert "STARVERSE_RESTART_COUNT=1" in _log_has(rank, "resumed from step 2")
    _programs_end(ranks)
    with django_capture_on_commit_callbacks(execute=True):
        assert job_sync(job.id) == "failed"
    job.refresh_from_db()
    assert job.exit_code == 7
    assert "simulated failure at step 3" in job.message
    assert {rank.status for rank in _ranks(job)} <= {"terminating", "terminated"}
    # each failure counted against its node; a node failed on twice is up for review
    assert sum(job.error_nodes.values()) == 2
    for node_id, count in job.error_nodes.items():
        assert (Node.objects.get(pk=node_id).review_since is not None) == (count == 2)


def test_an_evicted_ranks_pod_recovers_by_the_path_of_a_lost_node(
    fleet, client_for, owner, django_capture_on_commit_callbacks
):
    """A rank's pod gone while its node stays up (evicted, deleted) is handed by the reconcile
    loop to its job (jobs.recovery.job_rank_lost), which recovers as after a lost node: billing
    paused for the whole job, the rank placed again with its disks, the healthy rank kept on
    its node, every program started again with STARVERSE_RESTART_COUNT 1; a platform failure,
    not counted against max_restarts but against the node; the timeline names the eviction."""
    job = _job(client_for(owner), command=_trainer(2000), max_restarts=0)
    ranks = _up_and_checked(job, django_capture_on_commit_callbacks)
    assert job_sync(job.id) == "running"
    _log_has(ranks[0], "step 3/")
    evicted, healthy = ranks
    assert evicted.node is not None
    kube.delete("Pod", evicted.k8s_namespace, evicted.k8s_name, force=True)
    deadline = time.monotonic() + WAIT_S
    while kube.read("Pod", evicted.k8s_namespace, evicted.k8s_name) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert reconcile().recreated == [evicted.id]
    job.refresh_from_db()
    assert (job.status, job.error_restarts) == ("recovering", 0)
    assert job.error_nodes == {evicted.node_id: 1}
    after = _ranks(job)
    assert after[0].node_id not in (None, evicted.node_id)
    assert after[1].node_id == healthy.node_id
    # before, only the evicted rank paused: its healthy peer was billed while it waited
    assert all(rank.running_since is None for rank in after)
    last = JobEvent.objects.filter(job=job).order_by("-at", "-id").first()
    assert last is not None and last.status == "recovering"
    assert last.text == (
        f"Rank 0 lost its pod on {evicted.node.name} (its pod vanished): billing paused for "
        "the whole job; placing the rank again with its disks."
    )

    ranks = _up_and_checked(job, django_capture_on_commit_callbacks)
    assert job_sync(job.id) == "running"
    job.refresh_from_db()
    assert (job.restarts, job.error_restarts) == (1, 0)
    for rank in ranks:
        assert "STARVERSE_RESTART_COUNT=1" in _log_has(rank, "resumed from step")


def test_a_multi_node_job_is_billed_from_its_first_running_minute_not_its_preflight(
    fleet, client_for, owner, django_capture_on_commit_callbacks
):
    """The real meter (instances.metering.metering_tick) over a 2-node job: half an hour of
    ranks up and checking (the pre-flight check not yet passed) accrues nothing; the meter
    starts at the moment the check passes and every rank runs, and a tick a minute and a few
    seconds later accrues exactly one closed minute per rank."""
    job = _job(client_for(owner), command=_trainer(4000))
    for rank in _ranks(job):
        assert converge_until(converge.provision, rank.id) == "checking"
    ids = [rank.pk for rank in _ranks(job)]
    holdings = Holding.objects.filter(pk__in=ids)
    metering_tick(now=timezone.now() + timedelta(minutes=30))
    assert (
        list(holdings.values_list("metered_since", "metered_minutes", "pending_minutes"))
        == [(None, 0, 0)] * 2
    )
    assert all(rank.running_since is None and rank.cost_fen == 0 for rank in _ranks(job))
    assert job_sync(job.id) == "provisioning"

    passed = timezone.now()
    job.refresh_from_db()
    assert job.cluster_id is not None
    with django_capture_on_commit_callbacks(execute=True):
        assert preflight_run(job.cluster_id) == "passed"
    ranks = _ranks(job)
    assert job_sync(job.id) == "running"
    since = {rank.running_since for rank in ranks}
    assert len(since) == 1
    first = since.pop()
    assert first is not None and first >= passed
    assert set(holdings.values_list("metered_since", flat=True)) == {first}
    metering_tick(now=first + timedelta(minutes=1, seconds=5))
    assert sorted(holdings.values_list("metered_minutes", flat=True)) == [1, 1]
    usage = LedgerTransaction.objects.filter(kind=TransactionKind.USAGE, instance_id__in=ids)
    assert not usage.exists()  # accrued as pending, posted per hour and at the end


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"node_count": 129}, "node_count", "invalid_node_count"),
        ({"node_count": 0}, "node_count", "invalid_node_count"),
        ({"node_count": 1, "template": "torchrun"}, "template", "invalid"),
        ({"script": "echo hi", "command": "", "template": "megatron"}, "template", "invalid"),
        ({"disks": ["dsk_a", "dsk_b", "dsk_c"]}, "disks", "invalid"),
    ],
)
def test_bad_multi_node_orders_are_refused_and_create_nothing(
    fleet, client_for, owner, body, field, code
):
    answer = _submit(client_for(owner), **{"command": "x", **body})
    assert answer.status_code == 400, answer.json()
    assert answer.json()["code"] == code
    assert field in answer.json().get("errors", {}), answer.json()
    assert not Job.objects.exists() and not Instance.objects.exists()


def test_several_nodes_of_a_part_of_a_node_are_refused(fleet, client_for, owner):
    part = Offering.objects.exclude(name=WHOLE_NODE).filter(gpu_count=1).first()
    assert part is not None
    answer = _submit(client_for(owner), command="x", offering=part.id)
    assert answer.status_code == 400
    assert answer.json()["code"] == "not_whole_node"
    assert not Job.objects.exists()
