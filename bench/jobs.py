"""Job benchmarks on the kube emulator (its kubelets play the simulated trainer), each printed
next to a baseline measured in the same run:

- job_log_follow: log lines a second followed through the API (`GET /api/v1/jobs/{id}/logs
  ?follow=1`, the WSGI application with its middleware, token check and throttle) by 16
  clients at once, one per one-node job, in threads of this process; baseline: the same lines
  read straight from the emulator's `pods/log` by 16 threads through the same Kubernetes
  client, in turns with it. The web tier has no cluster credentials: the API reads what the
  worker shipped into the database (instances.provisioning.logs), so each job's trainer has
  ended and its log was shipped first; both sides then read whole logs as fast as they can:
  the read path's capacity, not the trainer's pace.
- job_resume_after_pod_loss: seconds from a running job's pod being deleted (force, as a lost
  node's pod is) to the simulated trainer logging `resumed from step N` in its new pod, with a
  Celery worker in this process running the tasks (the provisioning task's retries every
  PROVISIONING_POLL_S) and a beat thread sending `reconcile`, `workloads-check` and
  `jobs-sync` at their schedule from settings, as beat does from its start (the job is
  submitted as beat starts, so the loss falls early in the reconcile loop's 30 s period:
  near the worst case of detection); baseline: the same job's first start, order to
  `step 1`. The loss of one pod of a one-node job, not the issue's node loss of a 4-node job
  (multi-node jobs come later). Its parts are printed too: `job_pod_loss_detect` (the
  loss to the rank leaving `running`) and `job_pod_loss_replace` (from there to the resumed
  step).
- job_resume_after_node_loss: seconds from one node's kubelet and agent stopping to its rank's
  replacement running on another node and the simulated trainer logging its resumed step,
  for a 4-node job (whole nodes) with the same worker and beat, the node lease watch
  (fleet.liveness, as `manage.py fleet_watch_nodes` runs it) in a thread and stand-in agents
  reporting every AGENT_INTERVAL_S (the column their reports write): detection included;
  baseline: the same replacement, of another rank of the same job, when an operator takes
  its node out by hand (no detection). Its detection part is printed too
  (`job_node_loss_detect`, against the 60 s heartbeat rule).
"""

import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import recreate_database, report, setup_django

JOBS = 16
FOLLOW_STEPS = 9000
FOLLOW_ROUNDS = 3
WAIT_S = 120.0
BEAT_ENTRIES = ("reconcile", "workloads-check", "jobs-sync")


@contextmanager
def _emulated(fleet: dict[str, int]) -> Iterator[Any]:
    """The kube emulator with the platform pointed at it, the catalogue seeded and its nodes
    mirrored."""
    from django.core.management import call_command
    from django.test import override_settings

    from devstack.kube import KubeEmulator
    from fleet.services import nodes_sync_from_cluster
    from starverse.core import kube

    emulator = KubeEmulator(
        fleet=fleet, pull_delay_s=0.0, start_delay_s=0.05, tick_s=0.01, pod_termination_s=0.1
    ).start()
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    emulator.write_kubeconfig(str(kubeconfig))
    try:
        with override_settings(KUBECONFIG=str(kubeconfig)):
            kube._api_client.cache_clear()
            call_command("seed_catalog", verbosity=0)
            nodes_sync_from_cluster()
            yield emulator
    finally:
        emulator.stop()
        kube._api_client.cache_clear()


def _owner() -> Any:
    from bench.instances import _users

    return _users(1, prefix="j")[0]


def _submit(user: Any, command: str) -> Any:
    from compute.models import Offering
    from jobs.services import JobRequest, job_submit

    offering = Offering.objects.get(name="1× H100 80GB SXM")
    job, _created = job_submit(
        user=user,
        request=JobRequest(
            offering_id=offering.id, image_id="pytorch-2.1", command=command, nas=False
        ),
    )
    return job


def _rank(job_id: str) -> Any:
    from instances.models import Instance

    return Instance.objects.get(job_rank__job_id=job_id, job_rank__index=0)


def _until(check: Callable[[], bool], what: str, *, poll_s: float = 0.02) -> float:
    """Wait for `check`; the monotonic time it first held."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {WAIT_S:.0f} s")
        time.sleep(poll_s)
    return time.monotonic()


# --- job_log_follow ------------------------------------------------------------------------


def _followed_through_api(job_id: str, token: str) -> int:
    """One follower's request, in a web thread that keeps its database connection between
    requests as the deploy's web workers do (CONN_MAX_AGE, starverse.settings)."""
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.get(f"/api/v1/jobs/{job_id}/logs", {"follow": "1"})
    if answer.status_code != 200:
        raise RuntimeError(f"logs of {job_id}: HTTP {answer.status_code}")
    return sum(chunk.count(b"\n") for chunk in answer.streaming_content)  # type: ignore[attr-defined]


def _connections_close(pool: ThreadPoolExecutor) -> None:
    """Each of the pool's threads closes its database connection (all of them at once, so
    that every thread takes one)."""
    from django.db import connection

    met = threading.Barrier(JOBS)

    def close(_n: int) -> None:
        met.wait(timeout=30)
        connection.close()

    list(pool.map(close, range(JOBS)))


def _followed_straight(namespace: str, name: str) -> int:
    from starverse.core import kube

    return kube.pod_log(namespace, name).count("\n")


def _turn(read: Callable[[int], int], pool: ThreadPoolExecutor) -> tuple[float, list[int]]:
    """The 16 readers at once, on the pool's threads: (seconds until the last is done, lines
    each read)."""
    began = time.perf_counter()
    lines = list(pool.map(read, range(JOBS)))
    return time.perf_counter() - began, lines


def job_log_follow() -> dict[str, Any]:
    from instances.provisioning import converge, logs
    from starverse.accounts.services import token_create
    from starverse.core import kube

    with _emulated({"h100": 2}):
        user = _owner()
        token = token_create(user=user, name="bench")[1]
        command = f"starverse-sim-train --steps {FOLLOW_STEPS} --step-seconds 0.001"
        jobs = [_submit(user, command) for _ in range(JOBS)]
        ranks = [_rank(job.id) for job in jobs]

        def provisioned(rank: Any) -> None:
            _until(lambda: _provision_once(converge, rank.id), f"{rank.id} running")

        provisioned(ranks[0])  # the tenant's namespace and policies once, then the rest
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(provisioned, ranks[1:]))
        for rank in ranks:
            rank.refresh_from_db()
            _until(partial(_ended, kube, rank), f"{rank.id}'s trainer to end", poll_s=0.1)
        # the worker's shipping (the web tier reads logs from the database): a pass, then the
        # last one each pod gets as it is deleted
        for rank in ranks:
            logs.log_ship(rank.id, rank.k8s_namespace, rank.k8s_name, attempt=0, final=True)

        api_rates, straight_rates = [], []
        # the web threads and the cluster readers each last the whole bench, as a web
        # worker's threads and their connections do; a first turn each opens them, unmeasured
        with ThreadPoolExecutor(JOBS) as web, ThreadPoolExecutor(JOBS) as readers:
            try:
                for turn in range(FOLLOW_ROUNDS + 1):
                    seconds, api_lines = _turn(
                        lambda n: _followed_through_api(jobs[n].id, token), web
                    )
                    api_rate = sum(api_lines) / seconds
                    seconds, raw_lines = _turn(
                        lambda n: _followed_straight(ranks[n].k8s_namespace, ranks[n].k8s_name),
                        readers,
                    )
                    if api_lines != raw_lines or min(raw_lines) < FOLLOW_STEPS:
                        raise RuntimeError(f"lines differ: API {api_lines}, straight {raw_lines}")
                    if turn:
                        api_rates.append(api_rate)
                        straight_rates.append(sum(raw_lines) / seconds)
            finally:
                _connections_close(web)
    return report(
        "job_log_follow",
        statistics.median(api_rates),
        "lines/s",
        statistics.median(straight_rates),
        f"the same {JOBS} logs read straight from the emulator's pods/log by "
        f"{JOBS} threads, in turns ({FOLLOW_ROUNDS} each, median)",
        "ratio >= 0.5",
    )


def _provision_once(converge: Any, instance_id: str) -> bool:
    """One pass of the provisioning task: True once the rank runs (the task retries what it
    is told to wait for, and the cluster's retryable errors)."""
    from starverse.core.kube import RetryableKubeError

    try:
        return bool(converge.provision(instance_id) == "running")
    except (converge.StillPending, RetryableKubeError):
        return False


def _ended(kube: Any, rank: Any) -> bool:
    """Whether the rank's container has exited (its pod Succeeded or Failed)."""
    pod = kube.read("Pod", rank.k8s_namespace, rank.k8s_name)
    return bool(pod) and pod["status"].get("phase") in ("Succeeded", "Failed")


# --- job_resume_after_pod_loss -----------------------------------------------------------


class Beat(threading.Thread):
    """Celery beat for the named entries of CELERY_BEAT_SCHEDULE: each sent to the worker one
    period after the start, then every period, as beat's scheduler does."""

    def __init__(self, app: Any, entries: dict[str, dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.app, self.entries = app, entries
        self.stopped = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        due = {name: start + float(entry["schedule"]) for name, entry in self.entries.items()}
        while not self.stopped.is_set():
            now = time.monotonic()
            for name, moment in due.items():
                if now >= moment:
                    self.app.send_task(self.entries[name]["task"])
                    due[name] = moment + float(self.entries[name]["schedule"])
            self.stopped.wait(min(due.values()) - now if due else 1.0)


@contextmanager
def _worker_and_beat() -> Iterator[None]:
    """A Celery worker in this process (one solo worker, on the in-memory broker) and the
    beat entries that find a lost pod and an ended program."""
    from celery.contrib.testing.worker import start_worker
    from django.conf import settings

    from starverse.celery import app
    from starverse.core import dispatch

    dispatch._load_task_modules()
    app.conf.task_always_eager = False
    beat = Beat(app, {name: settings.CELERY_BEAT_SCHEDULE[name] for name in BEAT_ENTRIES})
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        beat.start()
        try:
            yield
        finally:
            beat.stopped.set()
            beat.join()


def _log(kube: Any, rank: Any) -> str:
    return str(kube.pod_log(rank.k8s_namespace, rank.k8s_name))


def job_resume_after_pod_loss() -> list[dict[str, Any]]:
    from instances.models import Instance
    from jobs.models import Job
    from starverse.core import kube

    with _emulated({"h100": 2}), _worker_and_beat():
        user = _owner()
        ordered = time.monotonic()
        job = _submit(user, "starverse-sim-train --steps 100000 --step-seconds 0.1")
        rank = _rank(job.id)
        _until(lambda: rank.__class__.objects.get(pk=rank.pk).k8s_name != "", "a pod name")
        rank.refresh_from_db()
        first_step = _until(lambda: "step 1/" in _log(kube, rank), "the first step")
        # a running job: its rank running (the provisioning task saw its pod ready) and the
        # job following it (beat's `jobs-sync`), past its fifth step's checkpoint
        _until(lambda: Job.objects.get(pk=job.id).status == "running", "the job to run")
        _until(lambda: "step 5/" in _log(kube, rank), "step 5")

        lost = time.monotonic()
        kube.delete("Pod", rank.k8s_namespace, rank.k8s_name, force=True)
        detected = _until(
            lambda: Instance.objects.get(pk=rank.pk).status != "running",
            "the loss to be found",
            poll_s=0.01,
        )
        resumed = _until(lambda: "resumed from step" in _log(kube, rank), "the resumed step")
        log = _log(kube, rank)
        step = int(log.split("resumed from step", 1)[1].split()[0])
        if step < 5 or "STARVERSE_RESTART_COUNT=1" not in log:
            raise RuntimeError(f"not resumed from its checkpoint:\n{log}")
    first = first_step - ordered
    return [
        report(
            "job_resume_after_pod_loss",
            resumed - lost,
            "s",
            first,
            "the same job's first start: order to `step 1` logged",
            "value <= 60 (the issue's node-loss goal, detection included)",
        ),
        report(
            "job_pod_loss_detect",
            detected - lost,
            "s",
            _period("reconcile"),
            "the reconcile loop's period (beat)",
            "value <= baseline",
        ),
        report(
            "job_pod_loss_replace",
            resumed - detected,
            "s",
            first,
            "the same job's first start",
            "ratio <= 2",
        ),
    ]


# --- job_resume_after_node_loss ----------------------------------------------------------

NODE_JOB_NODES = 4
AGENT_INTERVAL_S = 5.0
WHOLE_NODE = "8× H100 80GB SXM bare metal"


class Agents(threading.Thread):
    """Stand-in node agents: every node reports each AGENT_INTERVAL_S (the report's
    `last_report_at`), but those stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopped_nodes: set[str] = set()
        self.stopped = threading.Event()

    def run(self) -> None:
        from django.db import connection
        from django.utils import timezone

        from fleet.models import Node

        try:
            while not self.stopped.wait(AGENT_INTERVAL_S):
                Node.objects.exclude(name__in=self.stopped_nodes).update(
                    last_report_at=timezone.now()
                )
        finally:
            connection.close()


@contextmanager
def _lease_watch() -> Iterator[Agents]:
    """The node lease watch in a thread and the stand-in agents."""
    from fleet.liveness import node_leases_follow
    from fleet.models import DEFAULT_REGION

    stop = threading.Event()
    follower = threading.Thread(
        target=node_leases_follow, kwargs={"region": DEFAULT_REGION, "stop": stop}, daemon=True
    )
    agents = Agents()
    follower.start()
    agents.start()
    try:
        yield agents
    finally:
        stop.set()
        agents.stopped.set()
        follower.join()
        agents.join()


def _multi_node_job(user: Any) -> Any:
    from compute.models import Offering
    from jobs.services import JobRequest, job_submit

    job, _created = job_submit(
        user=user,
        request=JobRequest(
            offering_id=Offering.objects.get(name=WHOLE_NODE).id,
            image_id="pytorch-2.1",
            command="starverse-sim-train --steps 100000 --step-seconds 0.1",
            node_count=NODE_JOB_NODES,
            nas=False,
        ),
    )
    return job


def _step_5_logged(kube: Any, rank: Any) -> bool:
    return "step 5/" in _log(kube, rank)


def _node_of(rank_id: str) -> Any:
    from instances.models import Instance

    node = Instance.objects.get(pk=rank_id).node
    if node is None:
        raise RuntimeError(f"{rank_id} holds no node")
    return node


def _resumed_on_another_node(kube: Any, rank_id: str, node_id: Any, attempt: int) -> bool:
    """The rank runs on another node than `node_id`, its program's attempt `attempt` logged
    its resumed step."""
    from instances.models import Instance

    rank = Instance.objects.get(pk=rank_id)
    if rank.status != "running" or rank.node_id in (None, node_id):
        return False
    try:
        log = _log(kube, rank)
    except Exception:  # its new pod not there yet
        return False
    return f"STARVERSE_RESTART_COUNT={attempt}" in log and "resumed from step" in log


def job_resume_after_node_loss() -> list[dict[str, Any]]:
    from fleet.models import Node
    from fleet.services import node_transition
    from instances.models import Instance
    from jobs.models import Job
    from starverse.core import kube

    with (
        _emulated({"h100": NODE_JOB_NODES + 2}) as emulator,
        _worker_and_beat(),
        _lease_watch() as agents,
    ):
        job = _multi_node_job(_owner())
        ranks = list(Instance.objects.filter(job_rank__job_id=job.id).order_by("job_rank__index"))
        _until(lambda: Job.objects.get(pk=job.id).status == "running", "the job to run")
        for rank in ranks:
            rank.refresh_from_db()
            _until(partial(_step_5_logged, kube, rank), "step 5 on every rank")

        # one node's kubelet and agent stop: found by the lease watch, its rank replaced
        lost = _node_of(ranks[-1].pk)
        agents.stopped_nodes.add(lost.name)
        began = time.monotonic()
        emulator.lose_node(lost.name)
        detected = _until(
            lambda: Node.objects.get(pk=lost.pk).state == "down", "the loss to be found"
        )
        resumed = _until(
            lambda: _resumed_on_another_node(kube, ranks[-1].pk, lost.pk, 1),
            "the replacement's resumed step",
            poll_s=0.05,
        )
        _until(lambda: Job.objects.get(pk=job.id).status == "running", "the job to run again")

        # baseline: another rank's node taken out by hand (an operator; no detection)
        by_hand = _node_of(ranks[0].pk)
        agents.stopped_nodes.add(by_hand.name)
        hand_began = time.monotonic()
        emulator.lose_node(by_hand.name)
        node_transition(node=by_hand, to="down", reason="taken out by hand (bench)")
        hand_resumed = _until(
            lambda: _resumed_on_another_node(kube, ranks[0].pk, by_hand.pk, 2),
            "the baseline's resumed step",
            poll_s=0.05,
        )
    baseline = hand_resumed - hand_began
    return [
        report(
            "job_resume_after_node_loss",
            resumed - began,
            "s",
            baseline,
            f"the same replacement in the same {NODE_JOB_NODES}-node job when the node is taken "
            "out by hand (no detection)",
            "value <= 60",
        ),
        report(
            "job_node_loss_detect",
            detected - began,
            "s",
            60.0 + _period("fleet-heartbeats"),
            "the heartbeat rule's worst case (60 s timeout, checked every 15 s)",
            "value <= baseline / 2",
        ),
    ]


def _period(name: str) -> float:
    """A beat entry's period in seconds (CELERY_BEAT_SCHEDULE)."""
    from django.conf import settings

    schedule: Any = settings.CELERY_BEAT_SCHEDULE[name]["schedule"]
    return float(schedule)


def run() -> list[dict[str, Any]]:
    recreate_database()
    setup_django()
    follow = job_log_follow()
    recreate_database()
    pod_loss = job_resume_after_pod_loss()
    recreate_database()
    return [follow, *pod_loss, *job_resume_after_node_loss()]
