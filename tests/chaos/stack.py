"""The platform's processes as `make run` starts them (bin/run), under the harness's control:
each can be killed with SIGKILL, stopped and started again. Its PostgreSQL and Redis are
servers of its own (so that restarting or flushing them touches no one else's), and the
platform reaches the Kubernetes emulator through a TCP proxy that can be cut (the API
unreachable while the emulated nodes and their pods run on, their state kept)."""

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psycopg2
import redis

from devstack import postgres, schema

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
KUBE_TOKEN = "starverse-kube-emulator-dev-token"
WEBHOOK_SECRET = "whsec_chaos"
# the instances' orders and endpoint replicas on H100s; clusters and jobs on whole A100 nodes
FLEET = "h100=4,a100=4"
AGENTS = 2  # node agents run for the first nodes (one of them flaps)
# gunicorn keeps an idle connection this long, as bin/run and the chart do (web.keepAliveSeconds)
KEEP_ALIVE_S = "75"
# The processes write their modules' bytecode (__pycache__, ignored by git) even where the
# environment says not to (PYTHONDONTWRITEBYTECODE, as on the development host): a worker
# started again after each kill, gunicorn's new workers, the flapping agent and the emulator
# then read it rather than compile every project module again, as a deployed image does.
BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}
# what the template database gets after the schema snapshot, in one start of Django
TEMPLATE_COMMANDS = (
    "from django.core.management import call_command; "
    "call_command('migrate', verbosity=0); call_command('seed_catalog')"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, redis.RedisError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready within {timeout:.0f} s")


class Proxy:
    """A TCP proxy to 127.0.0.1:target: `down()` refuses new connections and cuts open ones
    (as an API server that went away), `up()` serves again on the same port."""

    def __init__(self, target: int) -> None:
        self.target, self.port = target, free_port()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.up()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            if self._listener is not None:
                _close(self._listener)  # shutdown first: it wakes the thread in accept()
                self._listener = None
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._open.discard(source)
            self._open.discard(sink)
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def migrations_digest() -> str:
    """What the migrated template database was made from: every migration file's content."""
    digest = hashlib.sha256()
    for path in sorted(REPO.glob("*/migrations/*.py")) + sorted(REPO.glob("*/*/migrations/*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:12]


class Stack:
    """The processes of one chaos run under `root` (its logs in root/log): start() brings up
    PostgreSQL (a template database migrated once per set of migrations, copied for each run),
    Redis, the emulator and its proxy, the Stripe stand-in, then (once the harness has set up
    the fleet: start_platform()) gunicorn, the Celery worker, beat and the node agents."""

    def __init__(self, root: Path, pg_var: Path, fleet: str = FLEET) -> None:
        self.root, self.fleet = root, fleet
        self.log = root / "log"
        self.log.mkdir(parents=True, exist_ok=True)
        self.ports = {name: free_port() for name in ("web", "redis", "kube", "stripe")}
        self.pg = postgres.Server(var=pg_var, port=free_port())
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, tuple[list[str], dict[str, str]]] = {}
        self.proxy: Proxy | None = None
        self.database_url = ""
        # a compressed clock for the short version: the reconcile loop's period and patience
        self.clock: dict[str, str] = {}

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['web']}"

    @property
    def kube_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['kube']}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['redis']}/0"

    def env(self) -> dict[str, str]:
        """The platform's settings, as bin/run exports them, pointed at this stack's servers."""
        assert self.proxy is not None
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "starverse.settings.dev",
            "PYTHONUNBUFFERED": "1",
            **BYTECODE,
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis_url,
            "STARVERSE_VAR_DIR": str(self.root / "var"),
            "KUBECONFIG": str(self.root / "kubeconfig"),
            "STRIPE_API_BASE": f"http://127.0.0.1:{self.ports['stripe']}",
            "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "PUBLIC_BASE_URL": self.web_url,
            "DEV_PODS_WITHOUT_SSHD": "true",
            "PROMETHEUS_MULTIPROC_DIR": str(self.root / "prometheus"),
            # every order of the run is the harness's: a realistic per-user rate is not the point
            "API_THROTTLE_RATE": "100000/minute",
            **self.clock,
        }

    def start(self) -> None:
        (self.root / "var").mkdir(exist_ok=True)
        (self.root / "prometheus").mkdir(exist_ok=True)
        self.database_url = self._database()
        server = shutil.which("redis-server")
        assert server, "the chaos run needs Redis: apt-get install redis-server"
        redis_argv = [server, "--bind", "127.0.0.1", "--port", str(self.ports["redis"])]
        self._define("redis", [*redis_argv, "--save", "", "--appendonly", "no"], {})
        self.spawn("redis")
        wait_for(lambda: bool(redis.Redis.from_url(self.redis_url).ping()), 20, "Redis")
        kube = [PY, "-m", "devstack.kube", "--port", str(self.ports["kube"]), "--fleet", self.fleet]
        kube += ["--pull-delay", "0.3", "--start-delay", "0.2", "--eviction-grace", "20"]
        kube += ["--data-dir", str(self.root / "kube-volumes"), "--log-level", "WARNING"]
        # its objects kept on disk, as etcd keeps a real API server's: killed and started again
        # (kube_start), it serves the pods, claims and nodes it had
        kube += ["--state-dir", str(self.root / "kube-state")]
        self._define("kube", kube, {})
        self.spawn("kube")
        self.proxy = Proxy(self.ports["kube"])
        self._kubeconfig(self.proxy.port)
        wait_for(lambda: _answers(f"{self.kube_url}/version"), 60, "the Kubernetes emulator")
        hook = f"{self.web_url}/webhooks/stripe"
        stripe = [PY, "-m", "devstack.stripe", "--port", str(self.ports["stripe"])]
        self._define("stripe", [*stripe, "--webhook-url", hook, "--webhook-secret", WEBHOOK_SECRET])
        self.spawn("stripe")

    def start_platform(self, web_args: tuple[str, ...] = ()) -> None:
        """gunicorn (with web_args), the worker and beat (not waited for: wait_ready())."""
        web = [PY, "-m", "gunicorn", "starverse.wsgi:application", "--bind"]
        web += [f"127.0.0.1:{self.ports['web']}", "--workers", "2", "--threads", "4"]
        web += ["--keep-alive", KEEP_ALIVE_S, *web_args]
        web += ["--control-socket", str(self.root / "gunicorn.ctl"), "--graceful-timeout", "5"]
        self._define("web", web, {"KUBE_ACCESS": "false"})
        worker = [PY, "-m", "celery", "-A", "starverse", "worker", "--pool=threads"]
        self._define("worker", [*worker, "--concurrency=4", "-l", "INFO"])
        beat = [PY, "-m", "celery", "-A", "starverse", "beat", "-l", "INFO"]
        schedule = str(self.root / "var" / "celerybeat-schedule")
        self._define("beat", [*beat, "-s", schedule], {"KUBE_ACCESS": "false"})
        for name in ("web", "worker", "beat"):
            self.spawn(name)

    def start_agents(self, agent_tokens: list[Path]) -> None:
        """A node agent (simulated NVML) for each of the first AGENTS nodes' tokens."""
        for token in agent_tokens[:AGENTS]:
            agent = [PY, "-m", "nodeagent", "--source", "sim", "--kube-url", self.kube_url]
            agent += ["--platform-url", self.web_url, "--node", token.stem]
            self._define(f"agent:{token.stem}", [*agent, "--token-file", str(token)], {})
            self.spawn(f"agent:{token.stem}")

    def wait_ready(self) -> None:
        wait_for(lambda: _answers(f"{self.web_url}/readyz"), 120, "the console (gunicorn)")
        offset = 0
        wait_for(lambda: "ready" in self.log_since("worker", offset), 120, "the Celery worker")

    def _define(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.commands[name] = (argv, env or {})

    def spawn(self, name: str) -> subprocess.Popen[bytes]:
        argv, extra = self.commands[name]
        base = self.env() if self.proxy is not None else {**os.environ, **BYTECODE}
        env = {**base, **extra}
        with (self.log / f"{name.replace(':', '-')}.log").open("ab") as log:
            process = subprocess.Popen(
                argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.procs[name] = process
        return process

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.procs.pop(name)
        if process.poll() is None:
            process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def children(self, name: str) -> list[int]:
        """The pids of a process's children (gunicorn's workers), as Linux lists them."""
        pid = self.procs[name].pid
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def log_size(self, name: str) -> int:
        path = self.log / f"{name}.log"
        return path.stat().st_size if path.exists() else 0

    def log_since(self, name: str, offset: int) -> str:
        with (self.log / f"{name}.log").open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")

    def kube_start(self) -> None:
        """The emulator started again (after ``kill("kube")``) on the same port, from the
        objects it kept (--state-dir)."""
        self.spawn("kube")
        wait_for(lambda: _answers(f"{self.kube_url}/version"), 60, "the Kubernetes emulator")

    def postgres_restart(self) -> None:
        postgres.stop(self.pg)
        postgres.start(self.pg)

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            self.kill(name, signal.SIGTERM)
        if self.proxy is not None:
            self.proxy.down()
        postgres.stop(self.pg)

    def _kubeconfig(self, port: int) -> None:
        name = "chaos"
        text = (
            f"apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n"
            f"    server: http://127.0.0.1:{port}\nusers:\n- name: {name}\n  user:\n"
            f"    token: {KUBE_TOKEN}\ncontexts:\n- name: {name}\n  context:\n"
            f"    cluster: {name}\n    user: {name}\n    namespace: default\n"
            f"current-context: {name}\n"
        )
        (self.root / "kubeconfig").write_text(text)

    def _database(self) -> str:
        """A fresh database for this run, copied from the template made for the current
        migrations. The first time, as `make run` makes its database: the schema snapshot
        loaded (devstack/schema.py, ~1 s; when it is as new as the migrations), then, in one
        start of Django, `migrate` (nothing left to apply after the snapshot; every migration
        without one) and the catalogue's seeds."""
        postgres.start(self.pg)
        base = postgres.url(self.pg.port).rsplit("/", 1)[0]
        template = f"chaos_template_{migrations_digest()}"
        if not _exists(self.pg.port, template):
            _sql(self.pg.port, f'DROP DATABASE IF EXISTS "{template}_build" WITH (FORCE)')
            _sql(self.pg.port, f'CREATE DATABASE "{template}_build"')
            env = {**os.environ, "DATABASE_URL": f"{base}/{template}_build"}
            env["DJANGO_SETTINGS_MODULE"] = "starverse.settings.dev"
            env["STARVERSE_VAR_DIR"] = str(self.root / "var")
            schema.load(env["DATABASE_URL"])
            subprocess.run(
                [PY, "manage.py", "shell", "-c", TEMPLATE_COMMANDS],
                cwd=REPO,
                env=env,
                check=True,
                capture_output=True,
            )
            _sql(self.pg.port, f'ALTER DATABASE "{template}_build" RENAME TO "{template}"')
        _sql(self.pg.port, 'DROP DATABASE IF EXISTS "chaos_run" WITH (FORCE)')
        _sql(self.pg.port, f'CREATE DATABASE "chaos_run" TEMPLATE "{template}"')
        return f"{base}/chaos_run"


def _answers(url: str) -> bool:
    request = urllib.request.Request(  # noqa: S310 - the stack's own http:// addresses
        url, headers={"Authorization": f"Bearer {KUBE_TOKEN}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:  # noqa: S310 - local
            return bool(answer.status < 500)
    except urllib.error.HTTPError as error:
        return error.code < 500
    except (OSError, urllib.error.URLError):
        return False


def _sql(port: int, statement: str) -> None:
    conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
    conn.autocommit = True
    try:
        with conn.cursor() as cursor:
            cursor.execute(statement)
    finally:
        conn.close()


def _exists(port: int, database: str) -> bool:
    conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
            return cursor.fetchone() is not None
    finally:
        conn.close()
