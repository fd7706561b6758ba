"""The chaos run: rounds of seeded faults with orders, terminations and top-ups in flight, then
the invariants (tests/chaos/invariants.py) once the platform has settled."""

import functools
import io
import logging
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.stack import Stack

ORDER_OFFERING = "1× H100 80GB SXM"
PREFLIGHT_KILL = "worker kill -9 mid-pre-flight"
IMAGE = "pytorch-2.1"
FUND_FEN = 10_000_000
FAST_HASHER = "django.contrib.auth.hashers.MD5PasswordHasher"


@dataclass
class Options:
    seed: int = 31
    rounds: int = 3
    faults_per_round: int = 4
    beat_pause_s: float = 300.0
    kube_outage_s: float = 60.0
    settle_s: float = 150.0
    users: int = 4
    # the reconcile loop's period and patience (RECONCILE_INTERVAL_S, RECONCILE_STUCK_AFTER_S);
    # 0: the platform's defaults (30 s, 60 s)
    reconcile_interval_s: int = 0
    stuck_after_s: int = 0
    # how long a pre-flight round's lease runs without its worker renewing it
    # (CLUSTER_PREFLIGHT_LEASE_S): a round cut by a killed worker is taken over once it ran out;
    # 0: the platform's default (30 s)
    preflight_lease_s: int = 0
    faults: tuple[str, ...] = ()  # every round injects these, when given (else a seeded draw)
    job_steps: int = 60  # the simulated trainer's steps (one a second) of each round's job
    kinds: bool = True  # a cluster, a job and an endpoint ordered each round


@dataclass
class Report:
    faults: Counter[str] = field(default_factory=Counter)
    checks: int = 0
    violations: list[str] = field(default_factory=list)
    traffic: str = ""
    set_up_s: float = 0.0  # the processes started, the fleet and the people made
    log: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        stamped = f"[{time.strftime('%H:%M:%S')}] {line}"
        self.log.append(stamped)
        print(stamped, flush=True)


class Chaos:
    """One run on a started Stack: set_up() (Django pointed at its database, the fleet, the
    users), then run()."""

    def __init__(self, stack: Stack, options: Options) -> None:
        self.stack, self.options = stack, options
        self.rng = random.Random(options.seed)
        self.report = Report()
        self.live: list[tuple[int, str]] = []  # (user, instance) ordered and not terminated
        self._threads: list[threading.Thread] = []

    def set_up(self) -> None:
        os.environ.update(self.stack.env())
        import django

        django.setup()
        logging.getLogger().setLevel(logging.WARNING)  # the harness's own ORM calls: quiet
        from django.core.management import call_command
        from django.test import override_settings

        from compute.models import Offering
        from tests.chaos.traffic import PodSampler, Users
        from tests.chaos.workloads import MODEL, Submitter
        from tests.factories import fund, make_public_model, make_token, make_user

        self.stack.start_platform()  # they start while the fleet and the users are set up
        agents = self.stack.root / "agents"
        call_command("fleet_sync", agent_tokens=str(agents), stdout=io.StringIO())
        make_public_model(MODEL)
        tokens = []
        # they sign in with API tokens only: their passwords hashed fast (as the test settings
        # do), not with the CPU the platform's processes are starting on meanwhile
        with override_settings(PASSWORD_HASHERS=[FAST_HASHER]):
            for _ in range(self.options.users + 1):  # the last one orders the other kinds
                user = make_user()
                fund(user, FUND_FEN)
                tokens.append(make_token(user)[1])
        offering = Offering.objects.get(name=ORDER_OFFERING)
        self.users = Users(self.stack.web_url, tokens, offering.pk, IMAGE)
        offerings = dict(Offering.objects.values_list("name", "pk"))
        self.kinds = Submitter(self.users, self.options.users, offerings, self.options.job_steps)
        self.product = offering.gpu_model.product
        self.stack.start_agents(sorted(agents.glob("*.token")))
        self.stack.wait_ready()
        self.sampler = PodSampler(self.stack.kube_url, volumes=self.stack.root / "kube-volumes")
        self.sampler.start()

    # traffic ------------------------------------------------------------------------------

    def background(self, work: Callable[[], object]) -> threading.Thread:
        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        self._threads.append(thread)
        return thread

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=120)
        self._threads = [t for t in self._threads if t.is_alive()]

    def order(self, count: int = 2) -> None:
        """`count` orders from random users, sent now in the background."""
        for _ in range(count):
            user = self.rng.randrange(self.options.users)

            def send(user: int = user) -> None:
                instance = self.users.order(user)
                if instance:
                    self.live.append((user, instance))

            self.background(send)

    def terminate_some(self) -> None:
        """About half of the running orders terminated (in the background)."""
        for entry in list(self.live):
            if self.rng.random() < 0.5:
                self.live.remove(entry)
                self.background(functools.partial(self.users.terminate, *entry))

    def topup(self) -> threading.Thread:
        user = self.rng.randrange(self.options.users)
        return self.background(lambda: self.users.topup(user))

    # faults -------------------------------------------------------------------------------

    def faults(self) -> dict[str, Callable[[], None]]:
        """Every fault by the name the report counts it under."""
        send = self._send_task
        return {
            "worker kill -9 mid-provisioning": lambda: self._worker_kill(
                "provision_instance", lambda: self.order(3)
            ),
            "worker kill -9 mid-metering": lambda: self._worker_kill(
                "meter_usage", lambda: send("instances.tasks.meter_usage")
            ),
            "worker kill -9 mid-queue drain": lambda: self._worker_kill(
                "drain_queue", lambda: send("instances.tasks.drain_queue", self.product)
            ),
            # the round's cluster ordered now: its ranks up, the worker runs its pre-flight
            PREFLIGHT_KILL: lambda: self._worker_kill(
                "preflight_cluster", self.kinds.cluster, wait_s=90
            ),
            "web kill -9 mid-order": self._web_kill_mid_order,
            "web kill -9 mid-webhook": self._web_kill_mid_webhook,
            "beat stopped and started": self._beat_pause,
            "Kubernetes API unreachable": self._kube_outage,
            "Kubernetes API partitioned": self._kube_partition,
            "node agent flapping": self._agent_flap,
            "Redis flushed": self._redis_flush,
            "PostgreSQL restarted": self._postgres_restart,
        }

    def _send_task(self, name: str, *args: str) -> None:
        from starverse.celery import app

        app.send_task(name, args=list(args))

    def _worker_kill(self, task: str, trigger: Callable[[], None], wait_s: float = 30) -> None:
        """SIGKILL the worker at a random moment once it has received `task` (within `wait_s`);
        start it again (as its supervisor would)."""
        offset = self.stack.log_size("worker")
        trigger()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if f"{task}[" in self.stack.log_since("worker", offset):
                break
            time.sleep(0.05)
        else:
            self.report.say(f"  (the worker never received {task}: killed all the same)")
        time.sleep(self.rng.uniform(0.0, 0.5))
        self.stack.kill("worker")
        time.sleep(self.rng.uniform(0.5, 2.0))
        self.stack.spawn("worker")

    def _web_kill(self) -> None:
        """Every gunicorn worker killed with SIGKILL (the master starts new ones)."""
        for pid in self.stack.children("web"):
            os.kill(pid, signal.SIGKILL)

    def _web_kill_mid_order(self) -> None:
        self.order(4)
        time.sleep(self.rng.uniform(0.02, 0.4))
        self._web_kill()

    def _web_kill_mid_webhook(self) -> None:
        for _ in range(2):
            self.topup()
        time.sleep(self.rng.uniform(0.3, 1.2))  # paid: the stand-in is delivering its webhook
        self._web_kill()

    def _beat_pause(self) -> None:
        self.stack.kill("beat", signal.SIGTERM)
        self.order(2)
        time.sleep(self.options.beat_pause_s)
        self.stack.spawn("beat")

    def _kube_outage(self) -> None:
        """The emulator's process killed and, kube_outage_s later, started again with its
        objects and volumes kept (as a real API server keeps etcd): orders and terminations
        meanwhile."""
        self.stack.kill("kube")
        self.order(2)
        self.terminate_some()
        time.sleep(self.options.kube_outage_s)
        self.stack.kube_start()

    def _kube_partition(self) -> None:
        """The platform cut off from a running emulator (its proxy down) for kube_outage_s."""
        assert self.stack.proxy is not None
        self.stack.proxy.down()
        self.order(2)
        self.terminate_some()
        time.sleep(self.options.kube_outage_s)
        self.stack.proxy.up()

    def _agent_flap(self) -> None:
        agent = self.rng.choice([name for name in self.stack.commands if name.startswith("agent:")])
        for _ in range(3):
            self.stack.kill(agent)
            time.sleep(self.rng.uniform(0.5, 3.0))
            self.stack.spawn(agent)
            time.sleep(self.rng.uniform(0.5, 3.0))

    def _redis_flush(self) -> None:
        import redis

        self.order(2)
        time.sleep(self.rng.uniform(0.0, 0.5))
        server = redis.Redis.from_url(self.stack.redis_url)
        # only ever the stack's own Redis server (every db of it): never a shared one
        assert server.info("server")["process_id"] == self.stack.procs["redis"].pid
        server.flushall()

    def _postgres_restart(self) -> None:
        self.order(2)
        time.sleep(self.rng.uniform(0.0, 0.5))
        self.stack.postgres_restart()

    # rounds -------------------------------------------------------------------------------

    def run(self) -> Report:
        faults = self.faults()
        for number in range(1, self.options.rounds + 1):
            chosen = list(self.options.faults) or self.rng.sample(
                sorted(faults), min(self.options.faults_per_round, len(faults))
            )
            self.report.say(f"round {number}: {', '.join(chosen)}")
            self.order(2)
            if self.options.kinds:
                self.background(self.kinds.job)
                self.background(self.kinds.endpoint)
                if PREFLIGHT_KILL not in chosen:
                    self.background(self.kinds.cluster)
            for name in chosen:
                self.terminate_some()
                faults[name]()
                self.report.faults[name] += 1
                self.report.say(f"  injected: {name}")
            self.join()
            self.settle_and_check(f"after round {number}")
            self.kinds.end()  # its cluster and endpoint deleted: checked after the next round
        for entry in list(self.live):
            self.live.remove(entry)
            self.background(functools.partial(self.users.terminate, *entry))
        self.join()
        self.settle_and_check("at the end (everything terminated)")
        self.sampler.stop()
        p = self.users.promises
        made = self.kinds.made
        self.report.traffic = (
            f"{len(made.clusters)} clusters, {len(made.jobs)} jobs, {len(made.endpoints)} "
            f"endpoints; {p.requests} requests: {len(p.orders)} orders and {len(p.terminated)} "
            f"terminations answered 202, {len(p.topups)} top-ups paid; {p.connection_errors} "
            f"found no server and {p.answered_5xx} were answered 5xx (each asked again)"
        )
        return self.report

    def settle_and_check(self, when: str) -> None:
        from django.db import close_old_connections, connection

        from tests.chaos import invariants

        close_old_connections()
        connection.close()  # PostgreSQL may have restarted under the harness's own connection
        started, said = time.monotonic(), 0.0
        while time.monotonic() - started < self.options.settle_s:
            waiting = invariants.transitional() + self.kinds.transitional()
            if not waiting:
                break
            if time.monotonic() - said > 15:
                said = time.monotonic()
                self.report.say(f"  settling: {'; '.join(waiting)}")
            time.sleep(2)
        time.sleep(2)  # the sampler's last look at the pods
        self.report.say(f"settled in {time.monotonic() - started:.0f} s; checks {when}:")
        checks = invariants.checks(self.sampler, self.users.promises, self.kinds)
        for name, check in checks.items():
            found = check()
            self.report.checks += 1
            self.report.say(f"  {'ok  ' if not found else 'FAIL'} {name}")
            for line in found:
                self.report.say(f"       {line}")
                self.report.violations.append(f"{when}: {name}: {line}")


def run(options: Options, root: Path, pg_var: Path) -> Report:
    stack = Stack(root, pg_var)
    if options.reconcile_interval_s:
        stack.clock["RECONCILE_INTERVAL_S"] = str(options.reconcile_interval_s)
    if options.stuck_after_s:
        stack.clock["RECONCILE_STUCK_AFTER_S"] = str(options.stuck_after_s)
    if options.preflight_lease_s:
        stack.clock["CLUSTER_PREFLIGHT_LEASE_S"] = str(options.preflight_lease_s)
    try:
        started = time.monotonic()
        stack.start()
        chaos = Chaos(stack, options)
        chaos.set_up()
        chaos.report.set_up_s = time.monotonic() - started
        chaos.report.say(f"processes up, fleet and people set up in {chaos.report.set_up_s:.0f} s")
        return chaos.run()
    finally:
        stack.stop()
