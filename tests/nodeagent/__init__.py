"""Tests of the node agent (`nodeagent/`), and the small servers they talk to.

Nothing here touches Django or a database: the agent is a stdlib + pynvml program.
"""

import ctypes
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "nodeagent" / "fixtures"


def has_nvidia_driver() -> bool:
    """Whether this machine has libnvidia-ml (then the "no driver" tests are skipped)."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def run_python(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in the repository, without NODEAGENT_* or Django settings from outside."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("NODEAGENT_")}
    clean.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
        check=False,
    )


_HELD_PORTS: list[socket.socket] = []


def free_port() -> int:
    """A local port nothing listens on (connections to it are refused). It stays bound, never
    listening, until the process ends, so that no other server of this or another xdist worker
    is given it; a test's own server may still listen on it (both sides set SO_REUSEADDR)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(sock)
    return sock.getsockname()[1]


class FixedClock:
    """A UTC wall clock that moves only when told."""

    def __init__(self, start: datetime = datetime(2026, 11, 29, 21, 0, 15, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None

    def reply(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


ANSWERS: dict[int, Any] = {
    400: {"detail": "samples[0].at: must be an ISO 8601 time with a time zone", "code": "invalid"},
    401: {"detail": "Invalid node token."},
    404: {"detail": "Not found."},
    429: {"detail": "Slow down."},
    503: {"detail": "Service unavailable."},
}


class _PlatformHandler(_Quiet):
    def do_POST(self) -> None:
        platform: FakePlatform = self.server.owner  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        with platform.lock:
            platform.requests.append(
                {"path": self.path, "headers": dict(self.headers.items()), "body": body}
            )
            status, headers = platform.statuses.popleft() if platform.statuses else (202, {})
        if 200 <= status < 300:
            self.reply(status, {"accepted_samples": len(body["samples"])}, headers)
        else:
            self.reply(status, ANSWERS.get(status, {"detail": f"HTTP {status}"}), headers)


class FakePlatform(_Server):
    """The platform's report endpoint: records each POST, answers the queued statuses, then 202."""

    def __init__(
        self, statuses: Sequence[int | tuple[int, dict[str, str]]] = (), port: int = 0
    ) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.statuses: deque[tuple[int, dict[str, str]]] = deque(
            item if isinstance(item, tuple) else (item, {}) for item in statuses
        )
        super().__init__(_PlatformHandler, port)

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [request["body"] for request in self.requests]


class _KubeHandler(_Quiet):
    def do_GET(self) -> None:
        kube: FakeKube = self.server.owner  # type: ignore[attr-defined]
        parsed = urllib.parse.urlsplit(self.path)
        kube.requests.append(self.path)
        if parsed.path == f"/api/v1/nodes/{kube.node['metadata']['name']}":
            self.reply(200, kube.node)
        elif parsed.path == "/api/v1/pods":
            selector = urllib.parse.parse_qs(parsed.query).get("fieldSelector", [""])[0]
            wanted = selector.removeprefix("spec.nodeName=")
            items = [pod for pod in kube.pods if pod["spec"].get("nodeName") == wanted]
            self.reply(200, {"kind": "PodList", "apiVersion": "v1", "items": items})
        else:
            self.reply(404, {"kind": "Status", "code": 404})


class FakeKube(_Server):
    """The two GET paths of the Kubernetes API the simulation reads."""

    def __init__(self, node: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        self.node = node
        self.pods = pods
        self.requests: list[str] = []
        super().__init__(_KubeHandler)


def kube_node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": {"nvidia.com/gpu": labels.get("nvidia.com/gpu.count", "8")}},
    }


def kube_pod(
    name: str, node: str, phase: str, gpus: int, created: str = "2026-11-29T20:00:00Z"
) -> dict[str, Any]:
    limits = {"cpu": "8", "memory": "64Gi"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "namespace": "tenant-a", "creationTimestamp": created},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "pytorch", "resources": {"limits": limits}}],
        },
        "status": {"phase": phase},
    }


ServerT = TypeVar("ServerT", bound=_Server)


@contextmanager
def serving(server: ServerT) -> Iterator[ServerT]:
    try:
        yield server
    finally:
        server.stop()


def wait_for(predicate: Callable[[], bool], timeout: float = 3.0) -> bool:
    stop = threading.Event()
    deadline = datetime.now(UTC) + timedelta(seconds=timeout)
    while datetime.now(UTC) < deadline:
        if predicate():
            return True
        stop.wait(0.01)
    return predicate()
