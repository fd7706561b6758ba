"""The web terminal service (terminal.app under uvicorn) against the local cluster, through a
WebSocket client as a browser would use it: the owner gets a shell in the container (resize,
UTF-8, exit); another tenant's instance is refused exactly like a missing one; an anonymous or
ended session, a staff session without the second factor and a page of another origin are
refused; a stopped instance says so; an idle session closes with a message; a broken browser
connection ends the exec session; and each session is in the instance's timeline with who and
how long, never what was typed."""

import codecs
import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from instances.models import Instance, InstanceEvent
from instances.terminals import SHELL
from starverse.core import kube
from tests.factories import make_instance, make_operator, make_user

CONSOLE = "http://127.0.0.1:8000"  # PUBLIC_BASE_URL: the console's own origin


def _cookie(user: Any, *, second_factor: bool = False) -> str:
    """The console's session cookie of `user`, signed in."""
    client = Client()
    client.force_login(user)
    if second_factor:
        session = client.session
        session["_2fa_verified"] = str(user.pk)
        session.save()
    return f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"


class Browser:
    """One terminal WebSocket: the shell's output as text, the page's JSON messages apart."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.output = ""
        self.messages: list[dict[str, Any]] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def _next(self, deadline: float) -> None:
        frame = self.ws.recv(timeout=max(deadline - time.monotonic(), 0.01))
        if isinstance(frame, bytes):
            self.output += self._decoder.decode(frame)
        else:
            self.messages.append(json.loads(frame))

    def until(self, text: str, timeout: float = 5) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            self._next(deadline)
        return self.output

    def message(self, kind: str, timeout: float = 5) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not any(m["type"] == kind for m in self.messages):
            self._next(deadline)
        return next(m for m in self.messages if m["type"] == kind)

    def closed(self, timeout: float = 5) -> int | None:
        """Read on until the service closes; its close code."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self._next(deadline)
        except ConnectionClosed:
            return self.ws.close_code

    def type(self, text: str) -> None:
        self.ws.send(text.encode())


@contextmanager
def _open(
    url: str, instance_id: str, cookie: str = "", origin: str | None = CONSOLE
) -> Iterator[Browser]:
    headers = {"Cookie": cookie} if cookie else {}
    with connect(
        f"{url}/terminal/{instance_id}/ws",
        origin=origin,  # type: ignore[arg-type]
        additional_headers=headers,
        open_timeout=10,
    ) as ws:
        yield Browser(ws)


def _timeline(instance: Instance) -> list[str]:
    return [e.text for e in InstanceEvent.objects.filter(instance=instance).order_by("at", "id")]


def _wait(check: Any, what: str, timeout: float = 5) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def _ended(instance: Instance) -> str:
    return _wait(
        lambda: next((t for t in _timeline(instance) if t.startswith("Terminal session")), ""),
        "the session's end in the timeline",
    )


@pytest.fixture
def running(transactional_db, catalog, settings) -> tuple[Any, Instance]:
    user = make_user()
    instance = make_instance(user, status="running")
    settings.KUBE_ACCESS = "exec"  # what the terminal service runs with
    return user, instance


def test_the_owner_gets_a_shell_in_the_container(running, cluster, terminal_service):
    user, instance = running
    before = _timeline(instance)

    with _open(terminal_service, instance.id, _cookie(user)) as browser:
        assert browser.message("ready") == {"type": "ready"}
        assert browser.until("# ").endswith(f"root@{instance.k8s_name}:~# ")
        [session] = cluster.exec_sessions
        assert (session.namespace, session.pod, session.container, session.command) == (
            instance.k8s_namespace,
            instance.k8s_name,
            "main",
            tuple(SHELL),
        )
        browser.ws.send(json.dumps({"type": "resize", "cols": 120, "rows": 33}))
        browser.type("stty size\r")
        assert "stty size\r\n33 120\r\n" in browser.until("33 120")
        browser.type("nvidia-smi\r")
        table = browser.until("No running processes found")
        assert "|   0  NVIDIA H100 80GB HBM3          On  |" in table
        browser.type("echo 你好\r")
        assert "echo 你好\r\n你好\r\nroot@" in browser.until("你好\r\nroot@")
        browser.type("ls /public\r")
        assert "data  models\r\n" in browser.until("models\r\n")
        browser.type("exit\r")
        assert browser.closed() == 1000
        assert browser.messages[-1] == {
            "type": "notice",
            "level": "info",
            "text": "The shell exited.",
        }

    ended = _ended(instance)
    assert _timeline(instance) == [*before, f"Terminal opened by {user.email}.", ended]
    assert ended.startswith(f"Terminal session of {user.email} ended after 0 min ")
    assert ended.endswith(" s (the shell exited).")
    _wait(lambda: cluster.exec_sessions == [], "the exec session to end")


def test_another_tenants_instance_is_refused_like_a_missing_one(running, cluster, terminal_service):
    _owner, instance = running
    stranger = _cookie(make_user())
    opened = cluster.exec_sessions_total

    with _open(terminal_service, instance.id, stranger) as theirs:
        assert theirs.closed() == 4404
    with _open(terminal_service, "ins_doesnotexist", stranger) as missing:
        assert missing.closed() == 4404

    assert (
        theirs.messages
        == missing.messages
        == [{"type": "notice", "level": "error", "text": "No such instance."}]
    )
    assert not any("Terminal" in text for text in _timeline(instance))
    assert cluster.exec_sessions_total == opened


def test_without_a_signed_in_session_there_is_no_shell(running, cluster, terminal_service):
    user, instance = running
    operator = make_operator()
    instance.tenant = operator.tenant  # an operator's own instance: still needs the 2nd factor
    instance.save(update_fields=["tenant"])
    opened = cluster.exec_sessions_total
    ended = Client()
    ended.force_login(user)
    stale = f"{django_settings.SESSION_COOKIE_NAME}={ended.cookies['sessionid'].value}"
    ended.logout()

    for cookie in ("", stale, _cookie(operator)):  # anonymous, logged out, no second factor
        with _open(terminal_service, instance.id, cookie) as browser:
            assert browser.closed() == 4401
        assert browser.messages == [
            {
                "type": "notice",
                "level": "error",
                "text": "Log in to the console again, then reconnect.",
            }
        ]
    assert cluster.exec_sessions_total == opened

    with _open(terminal_service, instance.id, _cookie(operator, second_factor=True)) as verified:
        assert verified.message("ready") == {"type": "ready"}
    _ended(instance)


def test_a_page_of_another_origin_gets_no_websocket(running, cluster, terminal_service):
    user, instance = running
    opened = cluster.exec_sessions_total

    for origin in ("http://evil.example", "null", None):
        with pytest.raises(InvalidStatus) as refused:  # noqa: SIM117 - the open is what fails
            with _open(terminal_service, instance.id, _cookie(user), origin=origin):
                pass
        assert refused.value.response.status_code == 403

    assert cluster.exec_sessions_total == opened
    assert not any("Terminal" in text for text in _timeline(instance))


def test_a_stopped_instance_says_so(transactional_db, catalog, cluster, terminal_service):
    user = make_user()
    instance = make_instance(user, status="stopped")

    with _open(terminal_service, instance.id, _cookie(user)) as browser:
        assert browser.closed() == 4409

    assert browser.messages == [
        {
            "type": "notice",
            "level": "error",
            "text": "This instance is stopped: start it to open a terminal.",
        }
    ]


def test_an_idle_session_closes_with_a_message(running, cluster, terminal_service, settings):
    user, instance = running
    settings.TERMINAL_IDLE_MINUTES = 0.02  # 1.2 s

    with _open(terminal_service, instance.id, _cookie(user)) as browser:
        browser.until("# ")
        browser.ws.send(json.dumps({"type": "resize", "cols": 100, "rows": 30}))  # not input
        assert browser.closed() == 4408

    assert browser.messages[-1] == {
        "type": "notice",
        "level": "info",
        "text": "Closed after 0.02 minutes without input. Reconnect to go on.",
    }
    assert _ended(instance).endswith(" s (it was idle too long).")
    _wait(lambda: cluster.exec_sessions == [], "the exec session to end")


def test_a_broken_browser_connection_ends_the_exec_session(running, cluster, terminal_service):
    user, instance = running

    with _open(terminal_service, instance.id, _cookie(user)) as browser:
        browser.until("# ")
        assert len(cluster.exec_sessions) == 1
        browser.ws.socket.shutdown(socket.SHUT_RDWR)  # gone, without a closing handshake

    _wait(lambda: cluster.exec_sessions == [], "the exec session to end")
    assert _ended(instance).endswith(" s (the browser closed it).")


def test_a_shell_that_cannot_start_says_so_and_records_nothing(running, cluster, terminal_service):
    user, instance = running
    cluster.inject_api_fault(503, verb="create", resource="pods/exec")
    before = _timeline(instance)

    with _open(terminal_service, instance.id, _cookie(user)) as browser:
        assert browser.closed(timeout=15) == 4503

    assert browser.messages == [
        {
            "type": "notice",
            "level": "error",
            "text": "The shell could not be started (the container may be restarting). "
            "Try again in a moment.",
        }
    ]
    assert _timeline(instance) == before


def test_the_service_answers_its_health_check(terminal_service):
    url = terminal_service.replace("ws://", "http://")
    with urllib.request.urlopen(f"{url}/terminal/healthz", timeout=5) as answer:  # noqa: S310
        assert (answer.status, answer.read()) == (200, b"ok")


def test_the_service_needs_no_more_than_exec_access(running, cluster, terminal_service):
    user, instance = running
    assert django_settings.KUBE_ACCESS == "exec"
    with pytest.raises(kube.KubeAccessRefused):
        kube.read("Pod", instance.k8s_namespace, instance.k8s_name)

    with _open(terminal_service, instance.id, _cookie(user)) as browser:
        assert browser.message("ready") == {"type": "ready"}

    _ended(instance)
