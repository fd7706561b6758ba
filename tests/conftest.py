import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.result import allow_join_result
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from playwright.sync_api import Browser, sync_playwright
from rest_framework.test import APIClient

from compute.models import Image, Offering
from devstack.kube import KubeEmulator
from devstack.stripe import StripeFake
from fleet.services import nodes_sync_from_cluster
from starverse.core import kube
from tests.factories import make_token, make_user
from tests.registry import DockerRegistry
from tests.sshd import sshd_scratch

# The unit lane (`make test-fast`, `pytest --fast`): the suite less every test that needs one of
# these fixtures (directly, through other fixtures, or asked for while it runs: the guard below
# fails such a test in the lane) or that is in one of SLOW_MODULES. Such tests carry the `slow`
# marker, applied here and nowhere else; `make test` runs them all. docs/conventions.md#tests
LANE_FIXTURES = {
    "kube_emulator": "uses the Kubernetes emulator",
    "browser": "drives a browser",
    "live_server": "serves the console in a live server",
    "transactional_db": "commits, so its database is flushed after it",
    "docker_registry": "starts Debian's docker-registry",
}
# Modules whose tests start processes, servers or an emulator of their own, or walk every API
# operation: the fixtures above cannot say so. Left out of the lane at collection.
SLOW_MODULES = {
    "api/test_conformance.py": "Schemathesis requests to every API operation",
    "api/test_hostile_input.py": "hostile input to every API operation, as three users",
    "api/test_schema_walk.py": "every API operation's answers; some on the Kubernetes emulator",
    "chaos/test_chaos.py": "starts the platform's processes and injects faults into them",
    "cli/test_make_run.py": "drives `make run`",
    "cli/test_package.py": "builds the CLI's package",
    "clusters/test_preflight.py": "starts a Kubernetes emulator of its own",
    "clusters/test_rank_provisioning.py": "starts a Kubernetes emulator of its own",
    "clusters/test_scaling.py": "starts a Kubernetes emulator of its own",
    "core/test_dispatch.py": "starts fresh interpreters",
    "core/test_heap.py": "starts the web and worker processes",
    "core/test_keep_alive.py": "serves the project with gunicorn",
    "core/test_migrations.py": "migrates a database of the old layout forward",
    "core/test_production_settings.py": "loads the production settings in fresh interpreters",
    "core/test_redis_sentinel.py": "starts a Redis master, replica and sentinel, fails over",
    "deploy/test_helm_chart.py": "renders the Helm chart and validates every object",
    "deploy/test_restore_drill.py": "dumps, restores and serves a database with gunicorn",
    "deploy/test_rolling_restart.py": "restarts gunicorn and Celery workers under load",
    "devstack/test_kube.py": "starts Kubernetes emulators of its own",
    "devstack/test_kube_exec.py": "starts a Kubernetes emulator of its own",
    "devstack/test_kube_gpu.py": "starts Kubernetes emulators of its own",
    "devstack/test_kube_keda.py": "starts a Kubernetes emulator of its own",
    "devstack/test_kube_more.py": "starts Kubernetes emulators of its own",
    "devstack/test_kube_rbac.py": "starts a Kubernetes emulator of its own",
    "devstack/test_postgres.py": "starts PostgreSQL servers",
    "endpoints/test_rbac.py": "uses the Kubernetes emulator of instances/test_cluster_rbac.py",
    "images/test_init_cluster_ssh.py": "runs the images' init and a real sshd",
    "images/test_init_ssh.py": "runs the images' init and a real sshd",
    "instances/test_cluster_rbac.py": "starts a Kubernetes emulator of its own",
    "instances/test_companion_migration.py": "migrates the instances' tables back and forward",
    "instances/test_regions.py": "starts a Kubernetes emulator of its own",
    "nodeagent/test_package.py": "builds the node agent's package",
}
# The longest tests (minutes each): the first to run (pytest_collection_modifyitems).
LONGEST_MODULES = ("chaos/test_chaos.py",)
TESTS = Path(__file__).parent
# A test of the lane that takes longer than this is named at the end of the run.
LANE_BUDGET_S = 2.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the unit lane: leave out the tests marked slow (make test-fast)",
    )


def _slow_reason(item: pytest.Item) -> str | None:
    """Why a test is not a unit test (None: it is)."""
    if item.path.is_relative_to(TESTS):
        module = item.path.relative_to(TESTS).as_posix()
        if module in SLOW_MODULES:
            return SLOW_MODULES[module]
    for name in getattr(item, "fixturenames", ()):
        if name in LANE_FIXTURES:
            return LANE_FIXTURES[name]
    marker = item.get_closest_marker("django_db")
    if marker and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences")):
        return LANE_FIXTURES["transactional_db"]
    return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    inside = collection_path.is_relative_to(TESTS)
    if inside and config.getoption("fast"):
        return collection_path.relative_to(TESTS).as_posix() in SLOW_MODULES or None
    return None


def _module(item: pytest.Item) -> str:
    return item.path.relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane, left_out = [], []
    for item in items:
        if _slow_reason(item) is None:
            lane.append(item)
        else:
            item.add_marker(pytest.mark.slow)
            left_out.append(item)
    if config.getoption("fast") and left_out:
        items[:] = lane
        config.hook.pytest_deselected(items=left_out)
        return
    # The longest first, so that the last tests each xdist worker runs are short ones and no
    # worker is left running a long one alone at the end: LONGEST_MODULES, then the other
    # SLOW_MODULES (they start processes of their own), then every other module with a slow
    # test, then the unit lane's. A module's tests stay together (its module-scoped fixtures
    # are set up once per worker), in the order collected within each group.
    rank: dict[str, int] = {}
    for item in items:
        module = _module(item)
        if module in LONGEST_MODULES:
            mine = 0
        elif module in SLOW_MODULES:
            mine = 1
        else:
            mine = 2 if item.get_closest_marker("slow") else 3
        rank[module] = min(rank.get(module, mine), mine)
    items.sort(key=lambda item: rank[_module(item)])


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> None:
    """In the lane, a test that asks for a lane fixture while it runs fails, saying why."""
    reason = LANE_FIXTURES.get(fixturedef.argname)
    if reason and request.config.getoption("fast"):
        pytest.fail(f"not a unit test: it {reason}; add its module to SLOW_MODULES", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _lane_refuses_emulators(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the lane, a test that starts a Kubernetes emulator of its own fails, saying why."""
    if not request.config.getoption("fast"):
        yield
        return

    def start(self: KubeEmulator) -> KubeEmulator:
        pytest.fail(
            "not a unit test: it starts a Kubernetes emulator; see SLOW_MODULES", pytrace=False
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KubeEmulator, "start", start)
        yield


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The lane's tests over LANE_BUDGET_S, slowest first: each belongs in SLOW_MODULES or
    wants a cheaper set-up, so that the lane stays fast."""
    if not config.getoption("fast"):
        return
    durations: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                durations[report.nodeid] = durations.get(report.nodeid, 0.0) + report.duration
    over = sorted(((d, n) for n, d in durations.items() if d > LANE_BUDGET_S), reverse=True)
    if over:
        terminalreporter.section(f"unit lane: {len(over)} tests over {LANE_BUDGET_S:.0f} s")
        for duration, nodeid in over:
            terminalreporter.write_line(f"{duration:6.2f}s {nodeid}")


# The ledger refuses TRUNCATE (billing migration 0004) unless the transaction has set this; the
# flush that empties the database after each transactional test is the one place that does.
LEDGER_TRUNCATE_ALLOWED = "SET LOCAL starverse.ledger_truncate = 'on'"


@pytest.fixture(scope="session", autouse=True)
def _flush_may_truncate_the_ledger() -> Iterator[None]:
    from django.db.backends.postgresql.operations import DatabaseOperations

    flush = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self: DatabaseOperations, sql_list: list[str]) -> None:
        # execute_sql_flush runs its statements in one transaction: SET LOCAL ends with it.
        flush(self, [LEDGER_TRUNCATE_ALLOWED, *sql_list])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "execute_sql_flush", execute_sql_flush)
        yield


def served_database_url() -> str:
    """The test database as a DATABASE_URL, for a process of the platform that a test starts
    (a web server, another web process): it sees what the test committed."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A throwaway redis-server on a free port, for this session (one per xdist worker): tests
    that use it give their cache a key prefix of their own."""
    server = shutil.which("redis-server")
    assert server, "these tests need Redis: apt-get install redis-server (see .ci/run)"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url, socket_connect_timeout=0.2).ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(autouse=True)
def _clear_cache() -> Iterator[None]:
    from django.utils import translation

    from instances.lifecycle import _CATALOG

    cache.clear()
    _CATALOG.clear()
    translation.activate("en")  # a request's language must not leak into the next test
    yield
    translation.deactivate()
    cache.clear()
    _CATALOG.clear()


@pytest.fixture(autouse=True)
def _tasks_may_join_results() -> Iterator[None]:
    """Eager mode (the tests' Celery) runs each apply_async inside celery.result's
    denied_join_result(), which sets a process-wide flag and puts back the value it found:
    two threads that send tasks at once (a live server's) can leave it set for good, and every
    later .get() in this process then fails with "Never call result.get() within a task!".
    No real worker runs in a test process, so each test runs with the flag cleared."""
    with allow_join_result():
        yield


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def user(db: Any) -> Any:
    return make_user()


@pytest.fixture
def client_for(db: Any) -> Callable[[Any], APIClient]:
    """An API client authenticated with a fresh bearer token of the given user."""

    def build(user: Any) -> APIClient:
        client = APIClient()
        _token, plaintext = make_token(user)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
        return client

    return build


def run_threads(count: int, target: Callable[[int], Any]) -> list[Any]:
    """Run target(i) in `count` threads started together; return results or raised errors."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def work(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = target(index)
        except Exception as error:
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "threads hung (deadlock?)"
    return results


# The session kube emulator's fleet and its fast timings. A test that needs another fleet or
# other options (history size, eviction grace, validation off) starts its own emulator.
FLEET = {"h100": 2, "a100": 1, "rtx4090": 1}
KUBE_TIMINGS: dict[str, Any] = {
    "pull_delay_s": 0.02,
    "start_delay_s": 0.02,
    "tick_s": 0.01,
    "pod_termination_s": 0.01,
}


@pytest.fixture(scope="session")
def kube_emulator() -> Iterator[KubeEmulator]:
    """One kube emulator per test session (per xdist worker); tests take it through `emu` or
    `cluster`, which reset it first."""
    emulator = KubeEmulator(fleet=FLEET, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def kubeconfig(kube_emulator: KubeEmulator, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kubeconfig file pointing at the session's kube emulator."""
    return str(kube_emulator.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig"))


@pytest.fixture
def emu(kube_emulator: KubeEmulator) -> KubeEmulator:
    """The session's kube emulator back in its seeded state: 2×8 H100, 1×8 A100 and 1×8
    RTX 4090 nodes, Ready and uncordoned, and nothing created by an earlier test."""
    kube_emulator.reset()
    return kube_emulator


@pytest.fixture
def cluster(emu: KubeEmulator, kubeconfig: str, settings: Any) -> Iterator[KubeEmulator]:
    """The reset kube emulator (`emu`) with the platform pointed at it through a kubeconfig."""
    settings.KUBECONFIG = kubeconfig
    kube._api_client.cache_clear()
    yield emu
    kube._api_client.cache_clear()


@pytest.fixture
def catalog(cluster: KubeEmulator, db: Any) -> dict[str, Any]:
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    return {
        "h100x1": Offering.objects.get(name="1× H100 80GB SXM"),
        "h100x8": Offering.objects.get(name="8× H100 80GB SXM"),
        "h100_node": Offering.objects.get(name="8× H100 80GB SXM bare metal"),
        "a100_node": Offering.objects.get(name="8× A100 80GB SXM bare metal"),
        "image": Image.objects.get(pk="pytorch-2.1"),
    }


@pytest.fixture(scope="session")
def docker_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerRegistry]:
    """A real OCI registry (Debian's docker-registry, deletes enabled) per test session, its
    storage in a temporary directory; tests keep apart by their tenants' own repositories."""
    registry = DockerRegistry(tmp_path_factory.mktemp("registry"))
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def _stripe_server() -> Iterator[StripeFake]:
    with StripeFake() as server:
        yield server


@pytest.fixture
def stripe_fake(_stripe_server: StripeFake) -> StripeFake:
    """The session's Stripe stand-in, emptied: no sessions, events or faults, no webhook URL,
    its default webhook secret, delivery on."""
    _stripe_server.reset()
    return _stripe_server


@pytest.fixture
def payments(stripe_fake: StripeFake, settings: Any) -> StripeFake:
    """The platform's payments pointed at the emptied Stripe stand-in, without retries."""
    settings.STRIPE_API_BASE = stripe_fake.url
    settings.STRIPE_SECRET_KEY = "sk_test_suite"
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    return stripe_fake


@pytest.fixture
def sshd_root() -> Iterator[Path]:
    """A scratch root for Debian's real sshd, run by the images' init or by podsshd, and the
    real ssh client (tests/sshd.py): both required, as is root; every parent directory one
    that sshd's StrictModes accepts. Removed after the test."""
    with sshd_scratch() as root:
        yield root


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless Chromium from the system (never one Playwright downloads), shared by the
    session's browser tests (tests/e2e, the web terminal's): Playwright's sync API may be
    started once per thread. From then on an event loop runs in this thread, so Django's guard
    against ORM calls from async code is lifted for the rest of the session (the tests' queries
    are plain synchronous calls between page steps)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "the browser tests need Chromium: apt-get install chromium (see .ci/run)"
    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(executable_path=chromium)
        yield launched
        launched.close()
    finally:
        playwright.stop()
        if saved is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved
