"""A scripted HTTP server on 127.0.0.1 standing in for the API in the CLI's unit tests: each
test says what each call answers, and reads back what the CLI sent."""

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


@dataclass
class Sent:
    method: str
    path: str  # with the query string
    headers: dict[str, str]
    body: Any


@dataclass
class FakeApi:
    url: str = ""
    # (method, path with query) → answers given in turn, the last one repeated:
    # (status, JSON body or None, headers)
    answers: dict[tuple[str, str], list[tuple[int, Any, dict[str, str]]]] = field(
        default_factory=dict
    )
    sent: list[Sent] = field(default_factory=list)
    # (method, path with query) → a text/plain answer streamed chunk by chunk (HTTP/1.1
    # chunked, as a followed log is): each part a chunk, or a callable the server calls between
    # chunks (to wait for what the client did with the ones before)
    streams: dict[tuple[str, str], list[str | Callable[[], None]]] = field(default_factory=dict)

    def on(
        self,
        method: str,
        path: str,
        status: int = 200,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> "FakeApi":
        self.answers.setdefault((method, path), []).append((status, body, headers or {}))
        return self

    def stream(self, method: str, path: str, parts: list[str | Callable[[], None]]) -> "FakeApi":
        self.streams[(method, path)] = parts
        return self

    def answer(self, method: str, path: str) -> tuple[int, Any, dict[str, str]]:
        queue = self.answers.get((method, path))
        if not queue:
            return 404, {"detail": "Not found.", "code": "not_found"}, {}
        return queue.pop(0) if len(queue) > 1 else queue[0]


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    yield from _served()


@pytest.fixture
def other_api() -> Iterator[FakeApi]:
    """A second scripted server, on another port: another origin for redirects."""
    yield from _served()


def _served() -> Iterator[FakeApi]:
    api = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            json_body = "json" in (self.headers.get("Content-Type") or "application/json")
            api.sent.append(
                Sent(
                    self.command,
                    self.path,
                    dict(self.headers.items()),
                    (json.loads(raw) if json_body else raw.decode()) if raw else None,
                )
            )
            parts = api.streams.get((self.command, self.path))
            if parts is not None:
                self._stream(parts)
                return
            status, body, headers = api.answer(self.command, self.path)
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, parts: list[str | Callable[[], None]]) -> None:
            self.protocol_version = "HTTP/1.1"
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in parts:
                if callable(part):
                    part()
                    continue
                data = part.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield api
    server.shutdown()
    server.server_close()


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean environment for `main()`: its own config directory, no token or server from the
    developer's shell, English messages. Returns the config directory."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("STARVERSE_TOKEN", "STARVERSE_API_URL", "STARVERSE_PROFILE", "LC_ALL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("STARVERSE_POLL_INTERVAL", "0")
    return tmp_path / "config" / "starverse"


@pytest.fixture
def init_root(sshd_root: Path) -> Path:
    """A scratch root for the images' real init (Debian's sshd), which plays an instance's
    (tests/sshd.py)."""
    assert shutil.which("ssh-keyscan"), "apt-get install openssh-client"
    return sshd_root
