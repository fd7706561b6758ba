"""Rolling restarts under load, counting errors (goal 0; docs/operator-guide.md "Upgrades").

The web tier: gunicorn as the image serves it (gthread workers), answering a steady load of API
reads (a fresh connection each, as a load balancer's) while its workers are replaced (HUP) and
then the whole server is upgraded in place (USR2 starts a new master on the same socket, TERM
drains the old one): every request is answered 200. The worker tier: tasks queued on Redis
while a second Celery worker starts and the first is stopped with SIGTERM, as a Deployment's
rollout does: the first finishes what it runs (a warm shutdown), what it had not started goes
back to the queue (acks_late), and every task runs exactly once, though Redis may deliver a
finished task's message again (starverse.core.delivery drops such a copy). Each test prints its
figure."""

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from celery import Celery

from tests.conftest import served_database_url
from tests.core.test_keep_alive import GUNICORN, _free_port, _serves
from tests.factories import fund, make_token, make_user

REPO = Path(__file__).resolve().parents[2]
LOAD_THREADS = 4
TASKS = 60


def _env() -> dict[str, str]:
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    env.update(DJANGO_SETTINGS_MODULE="starverse.settings.test", DATABASE_URL=served_database_url())
    # one token's steady load: over the default rate it would be answered 429, by design
    env.update(API_THROTTLE_RATE="100000/minute")
    return env


def _until(check: Callable[[], bool], what: str, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()}"
        time.sleep(0.1)


class Load:
    """Threads that ask the API for the balance until stopped, counting answers and errors."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.answered = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run) for _ in range(LOAD_THREADS)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                client = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                client.request(
                    "GET",
                    "/api/v1/billing/balance",
                    headers={"Authorization": f"Bearer {self.token}", "Connection": "close"},
                )
                answer = client.getresponse()
                answer.read()
                client.close()
                outcome = None if answer.status == 200 else f"HTTP {answer.status}"
            except OSError as error:
                outcome = f"{type(error).__name__}: {error}"
            with self._lock:
                self.answered += outcome is None
                if outcome is not None:
                    self.errors.append(outcome)

    def __enter__(self) -> "Load":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def _booted(log: Path) -> int:
    return log.read_text().count("Booting worker")


@pytest.mark.django_db(transaction=True)
def test_web_restarts_and_an_in_place_upgrade_under_load_answer_every_request(tmp_path):
    user = make_user()
    fund(user, 10_000)
    token = make_token(user)[1]
    port, log, pidfile = _free_port(), tmp_path / "gunicorn.log", tmp_path / "gunicorn.pid"
    # the console script, as bin/run and the image start it: `python -m gunicorn` would put
    # gunicorn's own directory first on the upgraded master's path (its http package shadows
    # the standard library's)
    command = [
        str(Path(sys.executable).parent / "gunicorn"),
        GUNICORN[-1],
        "--workers",
        "2",
        "--threads",
        "4",
        "--bind",
        f"127.0.0.1:{port}",
    ]
    command += ["--pid", str(pidfile), "--log-level", "info", "--graceful-timeout", "30"]
    # a control socket of this test's (the default, ~/.gunicorn/gunicorn.ctl, is one per user)
    command += ["--control-socket", str(tmp_path / "gunicorn.ctl")]
    with log.open("wb") as out:
        old = subprocess.Popen(command, cwd=REPO, env=_env(), stdout=out, stderr=subprocess.STDOUT)
    new_master = None
    try:
        _until(lambda: _serves(port), "gunicorn to serve", log)
        with Load(port, token) as load:
            _until(lambda: load.answered >= 20, "answers before the restart", log)
            booted = _booted(log)
            old.send_signal(signal.SIGHUP)  # new workers, then the old ones drained
            _until(lambda: _booted(log) >= booted + 2, "the new workers", log)
            _until(lambda: load.answered >= 60, "answers after the restart", log)
            booted = _booted(log)
            old.send_signal(signal.SIGUSR2)  # the upgrade: a new master on the same socket
            # gunicorn's new master writes <pidfile>.2 until the old one has gone
            second = Path(f"{pidfile}.2")
            _until(lambda: second.exists() and _booted(log) >= booted + 2, "the new master", log)
            new_master = int(second.read_text())
            old.send_signal(signal.SIGTERM)  # the old master stops accepting, finishes, exits
            assert old.wait(timeout=60) == 0
            served = load.answered
            _until(lambda: load.answered >= served + 40, "answers from the new master", log)
        print(
            f"\nweb rolling restart: {load.answered} requests answered 200, "
            f"{len(load.errors)} errors (goal 0) across a worker restart and an in-place upgrade"
        )
        assert load.errors == []
    finally:
        for pid in (old.pid, new_master):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        old.wait(timeout=60)


def _worker(name: str, broker: str, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "celery", "-A", "starverse", "-b", broker, "worker"]
    command += ["-n", f"{name}@%h", "--concurrency", "2", "-l", "INFO"]
    command += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    # REDIS_URL: the settings' Redis transport (without it, the file-system broker of make run)
    env = {**_env(), "REDIS_URL": broker}
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


SUCCEEDED = re.compile(r"Task billing\.tasks\.audit_wallets\[([0-9a-f-]+)\] succeeded")
DROPPED = re.compile(r"task\.redelivered_after_it_ran task=billing\.tasks\.audit_wallets id=(\S+):")


def _done(*logs: Path, pattern: re.Pattern[str] = SUCCEEDED) -> list[str]:
    return [m for log in logs if log.exists() for m in pattern.findall(log.read_text())]


@pytest.mark.django_db(transaction=True)
def test_a_worker_rollout_runs_every_queued_task_once(redis_url, tmp_path):
    make_user()  # a wallet for the audit to read
    # not the process's current app: the tests after this one in the process resolve their
    # tasks (shared_task proxies) through the platform's app, as before it
    sender = Celery("rollout", broker=redis_url, set_as_current=False)
    ids = {sender.send_task("billing.tasks.audit_wallets").id for _ in range(TASKS)}
    first_log, second_log = tmp_path / "worker-1.log", tmp_path / "worker-2.log"
    first = _worker("first", redis_url, first_log)
    second = None
    try:
        _until(lambda: len(_done(first_log)) >= 5, "the first worker's tasks", first_log)
        second = _worker("second", redis_url, second_log)  # the new pod, before the old stops
        first.send_signal(signal.SIGTERM)  # warm shutdown: finish the running, give back the rest
        assert first.wait(timeout=120) == 0, first_log.read_text()
        _until(lambda: len(_done(first_log, second_log)) >= TASKS, "every task", second_log, 180)
        done = _done(first_log, second_log)
        print(
            f"\nworker rollout: {len(set(done))} of {TASKS} tasks ran "
            f"({len(done) - len(set(done))} twice, {len(ids - set(done))} lost; goal 0 and 0), "
            f"{len(_done(first_log))} by the stopped worker, "
            f"{len(_done(first_log, second_log, pattern=DROPPED))} redelivered after they ran"
        )
        assert sorted(done) == sorted(ids)
        assert "raised unexpected" not in first_log.read_text() + second_log.read_text()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=120)


@pytest.mark.django_db(transaction=True)
def test_a_redelivered_message_of_a_task_that_ran_is_acknowledged_and_not_run_again(
    redis_url, tmp_path
):
    make_user()
    sender = Celery("redeliver", broker=redis_url, set_as_current=False)
    ran = sender.send_task("billing.tasks.audit_wallets").id
    log = tmp_path / "worker.log"
    worker = _worker("only", redis_url, log)
    try:
        _until(lambda: _done(log) == [ran], "the first delivery", log)
        # what kombu's Redis transport does when it restores an unacknowledged message: the
        # same payload pushed back on the queue, marked redelivered; one of a task that ran and
        # one of a task that never did
        never_ran = "00000000-0000-4000-8000-000000000001"
        client = redis.Redis.from_url(redis_url)
        for task_id in (ran, never_ran):
            sender.send_task("billing.tasks.audit_wallets", task_id=task_id, queue="held")
            held = client.rpop("held")
            assert isinstance(held, bytes)
            payload = json.loads(held)
            payload["headers"]["redelivered"] = True
            payload["properties"]["delivery_info"]["redelivered"] = True
            client.lpush("celery", json.dumps(payload))
        _until(lambda: never_ran in _done(log), "the redelivered task that never ran", log)
        _until(lambda: _done(log, pattern=DROPPED) == [ran], "the copy dropped", log)
        # both acknowledged (the worker acknowledges a task just after its pool logs it done)
        _until(lambda: client.hlen("unacked") == 0, "the acknowledgements", log, 20)
        assert sorted(_done(log)) == sorted([ran, never_ran])
        assert client.llen("celery") == 0
    finally:
        worker.terminate()
        worker.wait(timeout=120)
