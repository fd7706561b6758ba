"""Instance benchmarks: order_to_running_p99, order_throughput, metering_tick_10k,
metering_tick_100k and api_list_instances, each printed next to a baseline measured in the same
run."""

import http.client
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import database_url, raw_pod_running, recreate_database, report, setup_django

if TYPE_CHECKING:  # Django is set up inside the benchmarks, so the model is imported there
    from starverse.accounts.models import User

ROOT = Path(__file__).resolve().parent.parent


def _users(count: int, prefix: str = "b") -> list:
    from django.contrib.auth.hashers import make_password

    from billing.models import Wallet
    from starverse.accounts.models import Tenant, User

    password = make_password(None)
    tenants = Tenant.objects.bulk_create(
        [Tenant(id=f"tnt_{prefix}{n:06d}", name=f"t{n}") for n in range(count)]
    )
    Wallet.objects.bulk_create(
        [Wallet(id=f"wal_{prefix}{n:06d}", tenant=t, cash_fen=10**9) for n, t in enumerate(tenants)]
    )
    return User.objects.bulk_create(
        [
            User(
                id=f"usr_{prefix}{n:06d}",
                email=f"{prefix}{n}@bench.example",
                tenant=t,
                password=password,
            )
            for n, t in enumerate(tenants)
        ]
    )


def _with_holdings(instances: list) -> list:
    """The instances (unsaved), their GPU holdings saved first, as an order makes them: the
    database holds every instance to a holding of its id. A running one is metered from its
    `running_since` (compute.metering), as its start made it."""
    from compute.choices import HoldingKind
    from compute.holdings import holding_new
    from compute.models import Holding

    holdings = []
    for i in instances:
        holding = holding_new(
            holding_id=i.id,
            kind=HoldingKind.INSTANCE,
            tenant_id=i.tenant_id,
            created_by_id=i.created_by_id,
            offering=i.offering,
            waiting=False,
        )[0]
        if i.running_since is not None:
            holding.meter_key, holding.metered_since = f"usage:{i.id}:1", i.running_since
        holdings.append(holding)
    Holding.objects.bulk_create(holdings, batch_size=2000)
    return instances


def _nodes(count: int) -> None:
    from fleet.models import Node

    Node.objects.bulk_create(
        [
            Node(
                name=f"gpu-h100-b{n:03d}",
                gpu_product="NVIDIA H100 80GB HBM3",
                gpu_count=8,
                gpu_memory_mb=81559,
                interconnect="nvlink",
            )
            for n in range(count)
        ]
    )


# --- order_to_running_p99 ------------------------------------------------------------------


def order_to_running() -> dict:
    from django.core.management import call_command
    from django.test import override_settings

    from compute.models import Offering
    from devstack.kube import KubeEmulator
    from fleet.services import nodes_sync_from_cluster
    from instances.lifecycle import instance_order
    from instances.provisioning import converge
    from starverse.core import kube

    orders = 100
    emulator = KubeEmulator(
        fleet={"h100": 14}, pull_delay_s=0.0, start_delay_s=0.0, tick_s=0.01
    ).start()
    kubeconfig = Path(tempfile.mkdtemp()) / "kubeconfig"
    emulator.write_kubeconfig(str(kubeconfig))
    try:
        with override_settings(KUBECONFIG=str(kubeconfig), CELERY_TASK_ALWAYS_EAGER=False):
            kube._api_client.cache_clear()
            call_command("seed_catalog", verbosity=0)
            nodes_sync_from_cluster()
            offering = Offering.objects.get(name="1× H100 80GB SXM")
            users = _users(orders, prefix="o")

            def one(user: "User") -> float:
                began = time.perf_counter()
                instance, _ = instance_order(
                    user=user, offering_id=offering.id, image_id="pytorch-2.1"
                )
                while True:  # what the provisioning task does, retrying while the pod starts
                    try:
                        if converge.provision(instance.id) == "running":
                            return time.perf_counter() - began
                    except converge.StillPending:
                        time.sleep(0.02)

            with ThreadPoolExecutor(max_workers=8) as pool:  # eight Celery worker threads
                ours = sorted(pool.map(one, users))

            api = kube.core()

            def raw(n: int) -> float:
                began = time.perf_counter()
                raw_pod_running(api, f"raw-{n}", f"gpu-h100-{n % 14}")
                return time.perf_counter() - began

            with ThreadPoolExecutor(max_workers=8) as pool:
                baseline = sorted(pool.map(raw, range(orders)))
    finally:
        emulator.stop()
        kube._api_client.cache_clear()
    p99 = statistics.quantiles(ours, n=100)[98]
    base99 = statistics.quantiles(baseline, n=100)[98]
    return report(
        "order_to_running_p99",
        p99,
        "s",
        base99,
        "raw pod create→Running through the client, same emulator, p99",
        "value <= 5",
    )


# --- order_throughput ------------------------------------------------------------------------


def _order_worker(args: tuple) -> None:
    _index, user_ids, offering_id, ready, results = args
    setup_django()
    from django.conf import settings as django_settings

    django_settings.CELERY_TASK_ALWAYS_EAGER = False
    from instances import tasks
    from instances.lifecycle import instance_order
    from starverse.accounts.models import User
    from starverse.heap import freeze_startup_heap

    # Measuring placement, not workers: the task's delay() is stubbed out.
    tasks.provision_instance.delay = lambda *a, **k: None  # type: ignore[method-assign,assignment]
    users = list(User.objects.filter(pk__in=user_ids))
    freeze_startup_heap()  # as every web worker does after start-up (starverse/wsgi.py)
    ready.wait()  # every client has imported Django: order together
    began = time.perf_counter()
    for user in users:
        instance_order(user=user, offering_id=offering_id, image_id="pytorch-2.1")
    results.put((len(users), time.perf_counter() - began))


def _settle() -> None:
    """Start from a settled database: no checkpoint owed to the benchmarks before (pgbench's
    tens of thousands of transactions) lands in the measured seconds."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")


def order_throughput() -> dict:
    from django.core.management import call_command

    from compute.models import Offering

    call_command("seed_catalog", verbosity=0)
    _nodes(100)  # 800 GPUs, more than the orders
    per_client, clients = 40, 16
    users = _users(per_client * clients)
    offering = Offering.objects.get(name="1× H100 80GB SXM").id
    _settle()
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    ready = ctx.Barrier(clients)
    processes = [
        ctx.Process(
            target=_order_worker,
            args=(
                (
                    i,
                    [u.id for u in users[i * per_client : (i + 1) * per_client]],
                    offering,
                    ready,
                    results,
                ),
            ),
        )
        for i in range(clients)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=300) for _ in processes]
    for process in processes:
        process.join()
    ours = sum(n for n, _ in outcomes) / max(seconds for _, seconds in outcomes)
    subprocess.run(["pgbench", "-i", "-q", "-s", "1", *_pg_args()], check=True, capture_output=True)
    baseline = pgbench_builtin("simple-update", clients=clients, seconds=10)
    return report(
        "order_throughput",
        ours,
        "orders/s",
        baseline,
        f"pgbench simple-update, {clients} clients",
        "value >= 300",
    )


def _pg_args() -> list[str]:
    from urllib.parse import urlparse

    url = urlparse(database_url())
    return [
        "-h",
        url.hostname or "127.0.0.1",
        "-p",
        str(url.port or 5432),
        "-U",
        url.username or "postgres",
        url.path.lstrip("/"),
    ]


def pgbench_builtin(script: str, *, clients: int, seconds: int) -> float:
    result = subprocess.run(
        [
            "pgbench",
            "-n",
            "-b",
            script,
            "-c",
            str(clients),
            "-j",
            str(clients),
            "-T",
            str(seconds),
            *_pg_args(),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return next(
        float(line.split()[2]) for line in result.stdout.splitlines() if line.startswith("tps = ")
    )


# --- metering_tick_10k, metering_tick_100k -------------------------------------------------------


def metering_tick_10k() -> list[dict]:
    return _metering_tick(10_000, "metering_tick_10k", "value <= 1")


def metering_tick_100k() -> list[dict]:
    recreate_database()
    return _metering_tick(100_000, "metering_tick_100k", "value <= 10")


def _metering_tick(count: int, name: str, goal: str) -> list[dict]:
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from compute.models import Holding, Offering
    from instances.metering import metering_tick
    from instances.models import Instance

    call_command("seed_catalog", verbosity=0)
    users = _users(1000, prefix="m")
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    now = timezone.now()
    Instance.objects.bulk_create(
        _with_holdings(
            [
                Instance(
                    id=f"ins_b{n:06d}",
                    tenant_id=users[n % 1000].tenant_id,
                    created_by=users[n % 1000],
                    name="bench",
                    offering=offering,
                    image_id="pytorch-2.1",
                    status="running",
                    session=1,
                    running_since=now - timedelta(seconds=61),
                )
                for n in range(count)
            ]
        ),
        batch_size=2000,
    )
    began = time.perf_counter()
    result = metering_tick(now=now)
    ours = time.perf_counter() - began
    assert result.charged_minutes == count, result
    # The hour's last minute: each instance's 60th minute accrued and its hour posted (one
    # usage posting and its entries an instance, as the minute's tick wrote before).
    Holding.objects.update(metered_minutes=59, pending_minutes=59)
    began = time.perf_counter()
    result = metering_tick(now=now + timedelta(minutes=59))
    posting = time.perf_counter() - began
    assert result.charged_minutes == count, result

    # Baseline: the same rows (a transaction and two entries per instance) in raw bulk INSERTs.
    began = time.perf_counter()
    with connection.cursor() as cursor:
        rows = [
            (
                f"txn_r{n:06d}",
                f"wal_m{n % 1000:06d}",
                "usage",
                f"raw:{n}",
                "",
                -37,
                -37,
                0,
                0,
                0,
                "GPU usage",
                "",
                f"ins_b{n:06d}",
                1_000_000 + n,  # its place in its wallet's ledger, after the tick's postings
                now,
            )
            for n in range(count)
        ]
        for chunk in range(0, count, 2000):
            part = rows[chunk : chunk + 2000]
            cursor.execute(
                "INSERT INTO billing_ledgertransaction (id, wallet_id, kind, idempotency_key, "
                "request_hash, amount_fen, cash_delta_fen, promo_delta_fen, cash_after_fen, "
                "promo_after_fen, description, reason, instance_id, seq, created_at) VALUES "
                + ", ".join(["(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"] * len(part)),
                [v for row in part for v in row],
            )
            entries = [(r[0], r[1], "cash", -37) for r in part] + [
                (r[0], None, "platform:revenue", 37) for r in part
            ]
            cursor.execute(
                "INSERT INTO billing_ledgerentry (transaction_id, wallet_id, account, amount_fen)"
                " VALUES " + ", ".join(["(%s,%s,%s,%s)"] * len(entries)),
                [v for row in entries for v in row],
            )
    baseline = time.perf_counter() - began
    raw = "raw bulk INSERT of a usage posting an instance"
    return [
        report(name, ours, "s", baseline, raw, goal),
        report(f"{name}_hourly_posting", posting, "s", baseline, raw, goal),
    ]


# --- api_list_instances ----------------------------------------------------------------------


def _load(port: int, requests: list[tuple[str, dict]], seconds: float, threads: int = 4) -> float:
    """Requests per second over keep-alive connections, cycling through `requests`."""
    done = [0] * threads
    stop_at = time.monotonic() + seconds

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        n = i
        while time.monotonic() < stop_at:
            path, headers = requests[n % len(requests)]
            n += threads
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            assert response.status == 200, response.status
            done[i] += 1
        conn.close()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(done) / seconds


def api_list_instances() -> dict:
    """50 tenants with 20 instances each, each client within the production per-user rate
    limit (600/minute), so the throttle costs what it costs in production."""
    from django.core.management import call_command

    from compute.models import Offering
    from instances.models import Instance
    from starverse.accounts.services import token_create

    call_command("seed_catalog", verbosity=0)
    users = _users(50, prefix="a")
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    Instance.objects.bulk_create(
        _with_holdings(
            [
                Instance(
                    tenant_id=user.tenant_id,
                    created_by=user,
                    name=f"job-{n}",
                    offering=offering,
                    image_id="pytorch-2.1",
                    status="stopped",
                )
                for user in users
                for n in range(20)
            ]
        )
    )
    ours_requests = [
        (
            "/api/v1/instances?page_size=20",
            {"Authorization": f"Bearer {token_create(user=user, name='bench')[1]}"},
        )
        for user in users
    ]
    bare_requests: list[tuple[str, dict[str, str]]] = [
        (f"/bench/bare-instances?tenant={user.tenant_id}", {}) for user in users
    ]
    port = 18765
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "DATABASE_URL": database_url(),
        # production runs with Redis for the throttles' cache, not the embedded file cache
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/1"),
    }
    subprocess.run(["redis-cli", "-n", "1", "flushdb"], capture_output=True, check=False)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "bench.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--threads",
            "2",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        for _ in range(100):
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/healthz")
                break
            except OSError:
                time.sleep(0.1)
        _load(port, ours_requests, 1.0)  # warm up
        _load(port, bare_requests, 0.5)
        # Eight one-second turns each, alternating: other work on a shared host then weighs on
        # both sides alike instead of on whichever ran while it did.
        turns = [
            (_load(port, ours_requests, 1.0), _load(port, bare_requests, 1.0)) for _ in range(8)
        ]
        ours = sum(o for o, _b in turns) / len(turns)
        baseline = sum(b for _o, b in turns) / len(turns)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return report(
        "api_list_instances",
        ours,
        "req/s",
        baseline,
        "bare Django view reading 20 rows, same gunicorn",
        "ratio >= 0.60",
    )


def run() -> list[dict]:
    recreate_database()
    setup_django()
    return [
        order_throughput(),
        *metering_tick_10k(),
        api_list_instances(),
        *metering_tick_100k(),
        _fresh(order_to_running),
    ]


def _fresh(bench: object) -> dict:
    recreate_database()
    return bench()  # type: ignore[operator]
