"""Jobs end to end on the Kubernetes emulator (its simulated trainer writes checkpoints to the
rank's disk and logs a line a step): submitted through the API, run to the end and billed only
while they run, failed with their exit code and last lines, run again by their restart policy
and after a lost pod (resuming from the checkpoint), cancelled, their logs kept after their
pods, another tenant's a 404."""

import contextlib
import threading
import time
from typing import Any

import pytest
from django.core import mail
from django.db import connection
from django.utils import translation

from fleet.models import Node
from instances.models import Instance, InstanceEvent, Workload, WorkloadLog
from instances.provisioning import converge
from instances.provisioning.logs import logs_ship
from instances.provisioning.reconcile import reconcile, workloads_check
from jobs.models import Job, JobEvent
from jobs.recovery import rank_restart
from jobs.resume import resumed_step
from jobs.services import job_sync
from starverse.core import kube
from storage.nas import nas_set_size
from tests.factories import converge_until, fund, make_user, read_existing

WAIT_S = 20
IMAGE = "pytorch-2.1"


def _trainer(steps: int, *, fail_at: int | None = None, code: int = 1, seconds: float = 0.05):
    flags = f" --fail-at {fail_at} --exit-code {code}" if fail_at else ""
    return f"starverse-sim-train --steps {steps} --step-seconds {seconds}{flags}"


def _submit(client, catalog, **body: Any):
    data = {"offering": catalog["h100x1"].id, "image": IMAGE, "nas": False, **body}
    return client.post("/api/v1/jobs", data, format="json")


def _job(client, catalog, **body: Any) -> Job:
    answer = _submit(client, catalog, **body)
    assert answer.status_code == 202, answer.json()
    return Job.objects.get(pk=answer.json()["id"])


def _rank(job: Job) -> Instance:
    return Instance.objects.get(job_rank__job=job, job_rank__index=0)


def _running(job: Job) -> Instance:
    """Its rank provisioned (as its task would) and the job following it."""
    assert converge_until(converge.provision, _rank(job).id) == "running"
    assert job_sync(job.id) == "running"
    return _rank(job)


def _program_ends(instance: Instance) -> dict[str, Any]:
    """Wait for the rank's pod to end, then the quick check that finds ended programs."""
    deadline = time.monotonic() + WAIT_S
    while True:
        pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            break
        assert time.monotonic() < deadline, pod["status"]
        time.sleep(0.05)
    assert workloads_check() == [instance.id]
    return pod


def _stopped(instance: Instance) -> None:
    assert converge_until(converge.stop, instance.id) == "stopped"


@pytest.fixture
def owner(db):
    user = make_user()
    fund(user, 1_000_000)
    return user


def test_a_job_runs_to_the_end_bills_its_minutes_and_gives_its_gpus_back(
    catalog, client_for, owner, django_capture_on_commit_callbacks
):
    client = client_for(owner)
    job = _job(client, catalog, name="sft", command=_trainer(3), env={"LR": "3e-5"})
    assert (job.status, job.nas, job.checkpoint_dir) == (
        "provisioning",
        False,
        f"/root/data/checkpoints/{job.id}",
    )
    instance = _running(job)
    pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod["metadata"]["labels"]["starverse.io/job"] == job.id.lower().replace("_", "-")
    env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
    assert env["STARVERSE_JOB_ID"] == job.id
    assert env["STARVERSE_RESTART_COUNT"] == "0"
    assert env["STARVERSE_CHECKPOINT_DIR"] == job.checkpoint_dir
    assert env["LR"] == "3e-5"

    _program_ends(instance)
    with django_capture_on_commit_callbacks(execute=True):
        assert job_sync(job.id) == "succeeded"

    job.refresh_from_db()
    instance.refresh_from_db()
    assert (job.exit_code, job.restarts) == (0, 0)
    assert job.finished_at is not None and job.started_at is not None
    assert instance.status in ("terminating", "terminated")
    # a run of a fraction of a minute: one started minute, nothing after the program ended
    assert instance.cost_fen == -(-catalog["h100x1"].price_per_hour_fen // 60)
    shown = client.get(f"/api/v1/jobs/{job.id}").json()
    assert shown["status"] == "succeeded"
    assert shown["cost_fen"] == instance.cost_fen
    assert instance.node is not None
    assert shown["ranks"] == [
        {"rank": 0, "instance": instance.id, "node": instance.node.name, "status": instance.status}
    ]
    events = [e["status"] for e in client.get(f"/api/v1/jobs/{job.id}/events").json()["results"]]
    assert events == ["queued", "provisioning", "running", "succeeded"]
    # one mail, through the account's default e-mail channel
    [ended] = mail.outbox
    assert ended.subject == "Job sft succeeded."
    assert ended.body == f"Job sft succeeded.\nhttp://127.0.0.1:8000/console/jobs/{job.id}/"


def test_a_failing_program_runs_again_by_its_policy_then_fails_with_its_code_and_lines(
    catalog, client_for, owner, django_capture_on_commit_callbacks
):
    client = client_for(owner)
    job = _job(
        client, catalog, command=_trainer(6, fail_at=3, code=4), max_restarts=1, name="buggy"
    )
    instance = _running(job)
    _program_ends(instance)
    assert job_sync(job.id) == "recovering"
    assert Job.objects.get(pk=job.id).restart_pending
    _stopped(instance)
    rank_restart(instance.id)  # its task, once the instance has stopped
    assert converge_until(converge.provision, instance.id) == "running"
    assert job_sync(job.id) == "running"
    pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
    env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
    assert env["STARVERSE_RESTART_COUNT"] == "1"

    _program_ends(instance)
    assert job_sync(job.id) == "failed"
    job.refresh_from_db()
    assert (job.exit_code, job.error_restarts, job.restarts) == (4, 1, 1)
    # the program's last lines: the second run resumed from the checkpoint and failed again
    assert job.message.splitlines()[-2:] == [
        "resumed from step 2",
        "error: simulated failure at step 3/6 (exit code 4)",
    ]
    assert JobEvent.objects.filter(job=job, status="failed").get().text == (
        "Failed with exit code 4."
    )
    assert _rank(job).status == "terminating"


def test_a_program_that_ends_before_provisioning_looks_ran_and_fails_with_its_code(
    catalog, client_for, owner
):
    """On a busy machine the program may end before provisioning first sees its pod ready: it
    ran (the job fails with the program's code), not a failed start of the instance."""
    job = _job(client_for(owner), catalog, command=_trainer(3, fail_at=1, code=3), max_restarts=0)
    instance = _rank(job)
    # the pod is made; its program runs meanwhile (and may already have ended when this pass
    # reads the pod back, on a fast or a busy machine alike)
    with contextlib.suppress(converge.StillPending):
        converge.provision(instance.id)
    instance = _rank(job)
    deadline = time.monotonic() + WAIT_S
    while read_existing("Pod", instance.k8s_namespace, instance.k8s_name)["status"].get(
        "phase"
    ) not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert converge_until(converge.provision, instance.id) == "running"
    assert workloads_check() == [instance.id]
    assert job_sync(job.id) == "failed"
    job.refresh_from_db()
    assert job.exit_code == 3


def test_a_lost_pod_resumes_from_the_checkpoint_with_billing_paused(catalog, client_for, owner):
    client = client_for(owner)
    job = _job(client, catalog, command=_trainer(400, seconds=0.05))
    instance = _running(job)
    deadline = time.monotonic() + WAIT_S
    while "step 5/" not in kube.pod_log(instance.k8s_namespace, instance.k8s_name):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    kube.delete("Pod", instance.k8s_namespace, instance.k8s_name, force=True)
    while kube.read("Pod", instance.k8s_namespace, instance.k8s_name) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.02)

    evicted_on = instance.node
    assert evicted_on is not None
    assert reconcile().recreated == [instance.id]
    instance.refresh_from_db()
    assert instance.running_since is None  # billing paused while it is placed again
    job.refresh_from_db()
    # told at once (not at the job's next look), by the path a lost node takes: a platform
    # failure, counted against the node it happened on (not yet up for review)
    assert (job.status, job.error_restarts, job.error_nodes) == (
        "recovering",
        0,
        {evicted_on.pk: 1},
    )
    assert Node.objects.get(pk=evicted_on.pk).review_since is None
    assert job_sync(job.id) == "recovering"
    assert converge_until(converge.provision, instance.id) == "running"
    assert job_sync(job.id) == "running"

    deadline = time.monotonic() + WAIT_S
    log = ""
    while "resumed from step" not in log:
        assert time.monotonic() < deadline, log
        log = kube.pod_log(instance.k8s_namespace, instance.k8s_name)
        time.sleep(0.05)
    resumed = int(log.split("resumed from step", 1)[1].split()[0])
    assert resumed >= 5
    job.refresh_from_db()
    assert (job.restarts, job.error_restarts) == (1, 0)
    assert "STARVERSE_RESTART_COUNT=1" in log
    texts = [e.text for e in JobEvent.objects.filter(job=job)]
    assert (
        f"Rank 0 lost its pod on {evicted_on.name} (its pod vanished): billing paused for the "
        "whole job; placing the rank again with its disks."
    ) in texts
    assert texts[-1].startswith("Running again on") and texts[-1].endswith("(restart 1).")

    # the shipped log of the new attempt says where it resumed: the timeline says it, once
    assert logs_ship() == 1
    assert WorkloadLog.objects.get(instance=instance, attempt=1).text.count("resumed from") == 1
    assert job_sync(job.id) == "running"
    assert job_sync(job.id) == "running"
    resumed_events = JobEvent.objects.filter(job=job, message__startswith="Resumed from")
    assert [e.text for e in resumed_events] == [f"Resumed from step {resumed} (restart 1)."]
    with translation.override("zh-hans"):
        assert str(resumed) in resumed_events.get().text
        assert "Resumed" not in resumed_events.get().text


def test_cancel_ends_it_keeps_its_logs_and_refuses_twice(
    catalog, client_for, owner, django_capture_on_commit_callbacks
):
    client = client_for(owner)
    job = _job(client, catalog, command=_trainer(400))
    instance = _running(job)
    deadline = time.monotonic() + WAIT_S
    while "step 2/" not in kube.pod_log(instance.k8s_namespace, instance.k8s_name):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    logs_ship()  # the worker's pass: the web tier reads what it shipped

    answer = client.delete(f"/api/v1/jobs/{job.id}")
    assert answer.status_code == 202
    assert answer.json()["status"] == "cancelling"
    assert converge_until(converge.terminate, instance.id) == "terminated"
    with django_capture_on_commit_callbacks(execute=True):
        assert job_sync(job.id) == "cancelled"
    kept = WorkloadLog.objects.get(instance=instance, attempt=0)
    assert "step 2/400" in kept.text
    logs = client.get(f"/api/v1/jobs/{job.id}/logs")
    assert logs.status_code == 200 and "step 2/400" in logs.content.decode()
    assert logs["X-Starverse-Attempt"] == "0"
    again = client.delete(f"/api/v1/jobs/{job.id}")
    assert (again.status_code, again.json()["code"]) == (409, "wrong_state")


@pytest.mark.django_db(transaction=True)
def test_logs_follow_streams_the_lines_as_the_worker_ships_them_and_tail_cuts(
    catalog, client_for, owner
):
    """The web tier reads logs from the database: the worker ships them (and stops the rank
    whose program ended, shipping its last lines); the follow streams them as they come."""
    client = client_for(owner)
    job = _job(client, catalog, command=_trainer(8, seconds=0.25))
    instance = _running(job)
    stop = threading.Event()

    def worker() -> None:
        try:
            while not stop.wait(0.2):
                logs_ship()
                if workloads_check():
                    converge_until(converge.stop, instance.id)
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        followed = client.get(f"/api/v1/jobs/{job.id}/logs?follow=1")
        assert followed.status_code == 200
        chunks = [chunk.decode() for chunk in followed.streaming_content]
    finally:
        stop.set()
        thread.join(timeout=20)
    text = "".join(chunks)
    steps = [line.split(" loss=")[0] for line in text.splitlines() if line.startswith("step")]
    assert steps == [f"step {n}/8" for n in range(1, 9)]
    assert text.splitlines()[-1] == "done"  # the stream ended with the program
    assert len(chunks) >= 2  # the lines came as they were shipped, not at the end at once
    tail = client.get(f"/api/v1/jobs/{job.id}/logs?tail=1", HTTP_ACCEPT="text/plain")
    assert (tail.status_code, tail.content.decode()) == (200, "done\n")
    bad = client.get(f"/api/v1/jobs/{job.id}/logs?tail=-1")
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid")
    missing = client.get(f"/api/v1/jobs/{job.id}/logs?rank=3")
    assert missing.status_code == 404


def test_shipping_appends_each_line_once_whatever_the_passes(catalog, client_for, owner):
    client = client_for(owner)
    job = _job(client, catalog, command=_trainer(6, seconds=0.1))
    instance = _running(job)
    for _ in range(40):  # passes while it prints, some of them at once
        logs_ship()
        time.sleep(0.03)
    _program_ends(instance)
    logs_ship()
    _stopped(instance)  # the last lines shipped as the pod is deleted
    kept = WorkloadLog.objects.get(instance=instance, attempt=0)
    lines = kept.text.splitlines()
    assert [line.split(" loss=")[0] for line in lines if line.startswith("step")] == [
        f"step {n}/6" for n in range(1, 7)
    ]
    assert lines[-1] == "done" and kept.complete
    assert logs_ship() == 0  # nothing is read once the rank stopped


def test_another_tenants_job_is_a_404(catalog, client_for, owner):
    job = _job(client_for(owner), catalog, command="true")
    stranger = make_user()
    other = client_for(stranger)
    for method, path in (
        ("get", f"/api/v1/jobs/{job.id}"),
        ("delete", f"/api/v1/jobs/{job.id}"),
        ("get", f"/api/v1/jobs/{job.id}/logs"),
        ("get", f"/api/v1/jobs/{job.id}/events"),
    ):
        assert getattr(other, method)(path).status_code == 404, path
    assert other.get("/api/v1/jobs").json()["results"] == []
    job.refresh_from_db()
    assert job.status != "cancelling"


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"command": "a", "script": "b"}, None, "invalid_command"),
        ({}, None, "invalid_command"),
        ({"command": "x", "env": {"STARVERSE_JOB_ID": "x"}}, "env", "invalid"),
        ({"command": "x", "env": {"1BAD": "x"}}, "env", "invalid"),
        ({"command": "x", "node_count": 2}, "offering", "not_whole_node"),
        ({"command": "x", "node_count": 129}, "node_count", "invalid_node_count"),
        ({"command": "x", "nas": True}, "nas", "no_nas"),
        ({"command": "x", "checkpoint_dir": "ckpt"}, "checkpoint_dir", "invalid"),
        ({"command": "x", "template": "deepspeed"}, "template", "invalid"),
    ],
)
def test_bad_orders_are_refused_with_the_field_and_create_nothing(
    catalog, client_for, owner, body, field, code
):
    answer = _submit(client_for(owner), catalog, **body)
    assert answer.status_code == 400, answer.json()
    assert answer.json()["code"] == code
    if field:
        assert field in answer.json().get("errors", {}), answer.json()
    assert not Job.objects.exists() and not Instance.objects.exists()


def test_the_same_idempotency_key_answers_the_same_job(catalog, client_for, owner):
    client = client_for(owner)
    first = client.post(
        "/api/v1/jobs",
        {"offering": catalog["h100x1"].id, "image": IMAGE, "command": "true", "nas": False},
        format="json",
        HTTP_IDEMPOTENCY_KEY="run-1",
    )
    second = client.post(
        "/api/v1/jobs",
        {"offering": catalog["h100x1"].id, "image": IMAGE, "command": "true", "nas": False},
        format="json",
        HTTP_IDEMPOTENCY_KEY="run-1",
    )
    assert first.json()["id"] == second.json()["id"]
    assert (Job.objects.count(), Instance.objects.count()) == (1, 1)
    other = client.post(
        "/api/v1/jobs",
        {"offering": catalog["h100x1"].id, "image": IMAGE, "command": "false", "nas": False},
        format="json",
        HTTP_IDEMPOTENCY_KEY="run-1",
    )
    assert (other.status_code, other.json()["code"]) == (409, "idempotency_conflict")


def test_a_skypilot_task_runs_unchanged_and_says_what_it_ignores(catalog, client_for, owner):
    nas_set_size(user=owner, size_gb=100)
    task = (
        "name: sky-sft\n"
        "resources:\n  accelerators: H100:1\n  use_spot: true\n  cloud: aws\n"
        "envs:\n  MODEL: qwen\n"
        "setup: echo setting up\n"
        f"run: {_trainer(2)}\n"
    )
    answer = client_for(owner).post(
        "/api/v1/jobs", data=task, content_type="text/yaml", HTTP_IDEMPOTENCY_KEY="sky-1"
    )
    assert answer.status_code == 202, answer.json()
    shown = answer.json()
    assert (shown["name"], shown["env"], shown["nas"]) == ("sky-sft", {"MODEL": "qwen"}, True)
    assert shown["checkpoint_dir"] == f"/nas/checkpoints/{shown['id']}"
    assert shown["script"].rstrip().endswith(f"exec bash -c '{_trainer(2)}'")
    assert any("use_spot" in note for note in shown["notes"])
    assert any("cloud" in note for note in shown["notes"])
    bad = client_for(owner).post("/api/v1/jobs", data="run: [", content_type="text/yaml")
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_task")


def test_a_job_that_cannot_pay_is_refused_like_any_order(catalog, client_for):
    poor = make_user()  # trial credit only: a job of H100s needs an hour of it
    answer = _submit(client_for(poor), catalog, command="true", offering=catalog["h100x8"].id)
    assert answer.status_code == 402, answer.json()
    assert not Job.objects.exists()


def test_a_job_stopped_by_its_platform_fails_with_the_reason(catalog, client_for, owner):
    from instances.lifecycle import instance_stop

    job = _job(client_for(owner), catalog, command=_trainer(400))
    instance = _running(job)
    instance_stop(instance_id=instance.id, reason="Your balance ran out.", by_owner=True)
    assert job_sync(job.id) == "running"  # still stopping: it waits
    _stopped(instance)
    assert job_sync(job.id) == "failed"
    text = JobEvent.objects.filter(job=job, status="failed").get().text
    assert text.startswith("It stopped before its program ended: ")
    assert Workload.objects.get(pk=instance.pk).exit_code is None
    assert InstanceEvent.objects.filter(instance=instance).exists()


def test_a_jobs_rank_acts_only_through_its_job(catalog, client_for, owner, client):
    api = client_for(owner)
    job = _job(api, catalog, command=_trainer(400))
    instance = _running(job)
    for action in ("stop", "start"):
        answer = api.post(f"/api/v1/instances/{instance.id}/{action}")
        assert (answer.status_code, answer.json()["code"]) == (409, "job_rank"), action
        assert job.id in answer.json()["detail"]
    answer = api.delete(f"/api/v1/instances/{instance.id}")
    assert (answer.status_code, answer.json()["code"]) == (409, "job_rank")
    assert Instance.objects.get(pk=instance.id).status == "running"
    client.force_login(owner)
    listed = client.get("/console/instances/").content.decode()
    assert instance.id not in listed  # listed under its job


def _log_has(instance: Instance, text: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while True:
        instance.refresh_from_db()
        log = kube.pod_log(instance.k8s_namespace, instance.k8s_name)
        if text in log:
            return log
        assert time.monotonic() < deadline, log
        time.sleep(0.05)


def test_a_lost_node_moves_the_rank_and_the_program_resumes_there(
    catalog, client_for, owner, cluster, django_capture_on_commit_callbacks
):
    from fleet.services import node_transition

    job = _job(client_for(owner), catalog, command=_trainer(400))
    instance = _running(job)
    _log_has(instance, "step 5/")
    lost = instance.node
    assert lost is not None

    cluster.lose_node(lost.name)
    # the node's loss is told to its instances, which recover at once (the tasks run here)
    with django_capture_on_commit_callbacks(execute=True):
        node_transition(node=lost, to="down", reason="heartbeat lost: no report for 61 s")
    assert converge_until(converge.provision, instance.id) == "running"
    assert job_sync(job.id) == "running"

    instance.refresh_from_db()
    assert instance.node_id != lost.pk
    log = _log_has(instance, "resumed from step")
    assert int(log.split("resumed from step", 1)[1].split()[0]) >= 5
    assert "STARVERSE_RESTART_COUNT=1" in log
    job.refresh_from_db()
    assert (job.restarts, job.error_restarts) == (1, 0)
    assert job.error_nodes == {}  # the node is down already: no review asked of an operator
    assert instance.node is not None
    texts = [e.text for e in JobEvent.objects.filter(job=job)]
    assert any(
        text.startswith(f"Rank 0 lost its node {lost.name} (heartbeat lost") for text in texts
    )
    last = JobEvent.objects.filter(job=job).order_by("-at", "-id").first()
    assert last is not None and last.text == (f"Running again on {instance.node.name} (restart 1).")
    assert InstanceEvent.objects.filter(
        instance=instance, message__startswith="The node %(node)s was lost"
    ).exists()


def test_a_job_past_its_time_limit_fails_and_gives_its_gpus_back(catalog, client_for, owner):
    from datetime import timedelta

    job = _job(client_for(owner), catalog, command=_trainer(400), time_limit_minutes=5)
    instance = _running(job)
    job.refresh_from_db()
    assert job.started_at is not None
    Job.objects.filter(pk=job.pk).update(started_at=job.started_at - timedelta(minutes=5))
    assert job_sync(job.id) == "failed"
    assert JobEvent.objects.filter(job=job, status="failed").get().text == (
        "Stopped at its time limit of 5 minutes."
    )
    assert Instance.objects.get(pk=instance.pk).status == "terminating"


def test_only_a_program_that_ended_of_itself_ends_its_rank():
    """A container that ended in a pod being deleted was stopped (its pod vanished: the program
    runs again), one in a pod the kubelet failed (evicted, node shut down) was killed: neither
    is the program's verdict."""
    from instances.provisioning.reconcile import _program_ended

    ended = kube.ContainerEnd(exit_code=1, finished_at=None, reason="Error", message="")
    pod = kube.ClusterPod("ns", "inst-1", "Failed", ended)
    assert _program_ended(pod)
    assert not _program_ended(kube.ClusterPod("ns", "inst-1", "Failed", ended, deleting=True))
    assert not _program_ended(kube.ClusterPod("ns", "inst-1", "Failed", ended, reason="Evicted"))
    assert not _program_ended(kube.ClusterPod("ns", "inst-1", "Running", None))


def test_a_restart_sent_twice_starts_the_rank_once(catalog, client_for, owner):
    job = _job(client_for(owner), catalog, command=_trainer(6, fail_at=2), max_restarts=2)
    instance = _running(job)
    _program_ends(instance)
    assert job_sync(job.id) == "recovering"
    _stopped(instance)
    assert job_sync(job.id) == "recovering"  # it sends the restart again: harmless
    rank_restart(instance.id)
    rank_restart(instance.id)
    assert Instance.objects.get(pk=instance.id).status == "provisioning"
    job.refresh_from_db()
    assert (job.status, job.restart_pending) == ("recovering", False)


def test_a_restart_the_account_may_not_take_ends_the_job_with_the_reason(
    catalog, client_for, owner
):
    from compute.models import TenantLimits

    job = _job(client_for(owner), catalog, command=_trainer(6, fail_at=2), max_restarts=2)
    instance = _running(job)
    _program_ends(instance)
    assert job_sync(job.id) == "recovering"
    _stopped(instance)
    # an operator lowered the account's GPU limit meanwhile
    TenantLimits.objects.update_or_create(tenant=owner.tenant, defaults={"max_running_gpus": 0})
    rank_restart(instance.id)
    job.refresh_from_db()
    assert job.status == "failed"
    last = JobEvent.objects.filter(job=job).order_by("-at", "-id").first()
    assert last is not None and last.text.startswith("It could not start again: ")
    assert Instance.objects.get(pk=instance.id).status == "terminating"


def test_the_list_reads_a_page_of_jobs_in_a_fixed_number_of_queries(
    catalog, client_for, owner, django_assert_max_num_queries
):
    client = client_for(owner)
    for n in range(6):
        _job(client, catalog, command=f"echo {n}")
    with django_assert_max_num_queries(12):
        listed = client.get("/api/v1/jobs").json()
    assert len(listed["results"]) == 6
    assert all(len(job["ranks"]) == 1 for job in listed["results"])


def test_a_ranks_instance_page_links_its_job_instead_of_offering_its_own_actions(
    catalog, client_for, owner, client
):
    job = _job(client_for(owner), catalog, command=_trainer(400), name="sft-run")
    instance = _running(job)
    client.force_login(owner)
    page = client.get(f"/console/instances/{instance.id}/").content.decode()
    assert "This instance is rank 0 of the job “sft-run”" in page
    assert f'href="/console/jobs/{job.id}/"' in page
    assert f"/instances/{instance.id}/stop/" not in page
    assert "data-job" in page


@pytest.mark.parametrize(
    ("log", "step"),
    [
        ("starting at step 0\nstep 1/9 loss=2.0\n", None),
        ("resumed from step 41\nstep 42/90 loss=1.0\n", 41),
        ("loading ckpt\nSTARVERSE_RESUMED_STEP=1200\n", 1200),
        ("STARVERSE_RESUMED_STEP=3\n  STARVERSE_RESUMED_STEP=7  \n", 7),
        ("echo STARVERSE_RESUMED_STEP=5 is how\nresumed from step x\n", None),
        (f"STARVERSE_RESUMED_STEP={2**70}\n", None),
    ],
)
def test_the_resumed_step_is_read_from_the_programs_own_line(log, step):
    assert resumed_step(log) == step


def test_the_resumed_line_is_looked_for_in_whole_lines_shipped_since_the_last_look(
    catalog, client_for, owner
):
    """jobs.services._log_news: a line still being shipped is not read yet (its step may not
    be whole), and what was read is not read again (the database sends only the rest). The
    log's row is written here as the worker's shipping would (instances.provisioning.logs)."""
    job = _job(client_for(owner), catalog, command=_trainer(400))
    rank = _running(job)
    WorkloadLog.objects.filter(instance=rank).delete()
    log = WorkloadLog.objects.create(instance=rank, attempt=0, text="a\nresumed from step 1")
    resumed = JobEvent.objects.filter(job=job, message__startswith="Resumed from")

    assert job_sync(job.id) == "running"
    assert not resumed.exists()  # "1" may be the start of "12"
    WorkloadLog.objects.filter(pk=log.pk).update(text="a\nresumed from step 12\n")
    assert job_sync(job.id) == "running"
    assert [e.text for e in resumed] == ["Resumed from step 12 (restart 0)."]

    other = _job(client_for(owner), catalog, command=_trainer(400))
    rank = _running(other)
    WorkloadLog.objects.filter(instance=rank).delete()
    log = WorkloadLog.objects.create(instance=rank, attempt=0, text="a\n")
    assert job_sync(other.id) == "running"
    # the two characters read are not read again: only what follows them is
    WorkloadLog.objects.filter(pk=log.pk).update(text="resumed from step 8\nstep 9/400\n")
    assert job_sync(other.id) == "running"
    assert not JobEvent.objects.filter(job=other, message__startswith="Resumed from").exists()
