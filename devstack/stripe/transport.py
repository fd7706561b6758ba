"""HTTP plumbing for the fake: the threaded server, the request handler, responses, routes."""

import json
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

from .errors import StripeFakeError


class _App(Protocol):
    def handle(
        self, method: str, target: str, raw: str, headers: dict[str, str], entry: dict[str, Any]
    ) -> "Response": ...

    def record_request(self, entry: dict[str, Any]) -> None: ...


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Idempotent:
    method: str
    path: str
    params: dict[str, Any]
    request_id: str
    response: Response | None = None  # None while the first request is still running


def json_response(status: int, data: Any, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(data, indent=2, ensure_ascii=False).encode()
    return Response(status, body, headers=dict(headers or {}))


def error_response(err: StripeFakeError) -> Response:
    return json_response(err.status, err.body(), err.headers)


def html_response(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return Response(status, text.encode(), "text/html; charset=utf-8", dict(headers or {}))


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: _App


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        return  # the fake logs one key=value line per request through StripeFake.log

    def _dispatch(self, method: str) -> None:
        started = time.monotonic()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        raw = self.rfile.read(length).decode("utf-8", "replace") if length > 0 else ""
        headers = {key.lower(): value for key, value in self.headers.items()}
        path = urlsplit(self.path).path
        entry: dict[str, Any] = {"kind": "request", "method": method, "path": path}
        try:
            response = self.server.fake.handle(method, self.path, raw, headers, entry)
        except Exception:  # a bug in the fake must still answer in Stripe's shape
            traceback.print_exc(file=sys.stderr)
            response = error_response(
                StripeFakeError(500, "Internal error in the fake", type="api_error")
            )
        entry.update(
            status=response.status,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        # Recorded before answering, so a client that saw the answer also sees the entry.
        self.server.fake.record_request(entry)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(response.body)


API_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(r"^/v1/checkout/sessions$"), "create_session"),
    ("GET", re.compile(r"^/v1/checkout/sessions/([^/]+)$"), "get_session"),
    ("POST", re.compile(r"^/v1/checkout/sessions/([^/]+)/expire$"), "expire_session"),
    ("POST", re.compile(r"^/v1/refunds$"), "create_refund"),
    ("GET", re.compile(r"^/v1/refunds/([^/]+)$"), "get_refund"),
    ("GET", re.compile(r"^/v1/payment_intents/([^/]+)$"), "get_payment_intent"),
    ("GET", re.compile(r"^/v1/charges/([^/]+)$"), "get_charge"),
    ("GET", re.compile(r"^/v1/disputes/([^/]+)$"), "get_dispute"),
    ("GET", re.compile(r"^/v1/events/([^/]+)$"), "get_event"),
]
CONTROL_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(r"^/_fake/sessions/([^/]+)/pay$"), "pay"),
    ("POST", re.compile(r"^/_fake/sessions/([^/]+)/async_result$"), "async_result"),
    ("POST", re.compile(r"^/_fake/sessions/([^/]+)/expire$"), "expire"),
    ("POST", re.compile(r"^/_fake/refunds/([^/]+)/settle$"), "settle"),
    ("POST", re.compile(r"^/_fake/charges/([^/]+)/refund$"), "dashboard_refund"),
    ("POST", re.compile(r"^/_fake/charges/([^/]+)/dispute$"), "open_dispute"),
    ("POST", re.compile(r"^/_fake/disputes/([^/]+)/close$"), "close_dispute"),
    ("GET", re.compile(r"^/_fake/events$"), "events"),
    ("POST", re.compile(r"^/_fake/events/([^/]+)/resend$"), "resend"),
    ("POST", re.compile(r"^/_fake/faults$"), "faults"),
]


def match_route(
    routes: list[tuple[str, re.Pattern[str], str]], method: str, path: str
) -> tuple[str, tuple[str, ...]] | None:
    for route_method, pattern, name in routes:
        found = pattern.match(path)
        if found and route_method == method:
            return name, found.groups()
    return None
