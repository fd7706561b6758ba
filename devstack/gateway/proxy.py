"""The development gateway: what the production proxy (Envoy Gateway, deploy/k8s/gateway.yaml)
does for the instances' addresses, on one machine, for ``make run`` and the tests.

For every request it asks the console's authorization check first (``/gateway/auth``, with
X-Forwarded-Host / -Uri / -Method / -Proto and the browser's cookies, as Traefik's ForwardAuth
sends them). A 2xx lets the request through, with the check's ``Authorization`` header added
(Envoy's ``headersToBackend``: Jupyter's token, which the browser never sees); any other answer
(the log-in redirect, the cookie being set, a 404) goes back to the browser as it is. Then it
routes the way the proxy does: by the HTTPRoutes the worker made on the cluster (host name →
Service and port), to that Service's port on the pod network, which the kube emulator stands in
for (devstack.kube.network; a Host header of ``<service>.<namespace>.svc.cluster.local:<port>``
on the emulator's address).

One thing it does that Envoy's check does not: it keeps a check's 2xx for AUTH_CACHE_S (2 s) per
address and cookie, so a page's burst of requests costs one check. A revoked share link or a
removed port therefore stops passing within those seconds here, at once in production. It does
not carry WebSockets (nothing in an emulated pod speaks them). Development only: no TLS.

For inference endpoints' hosts (routes labelled ``starverse.io/endpoint``) it also plays the
KEDA HTTP add-on's interceptor: the check there is the endpoint's API key (the request's
``Authorization`` is passed to the check, and is part of the 2 s cache's key); it counts the
requests in flight per host, holds a request while the endpoint has no Ready replica (a cold
start, up to ``cold_start_timeout_s``, then a 503 in OpenAI's error shape), and serves the
counts as ``{"<host>": {"concurrency": n}}`` at ``/__devgateway/queue`` on its own address
(``127.0.0.1:<port>``) for the emulator's KEDA stand-in. It also counts each host's requests,
latencies and generated tokens, handed out (and reset) at ``/__devgateway/stats``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web
from multidict import CIMultiDict

log = logging.getLogger("devstack.gateway")
AUTH_CACHE_S = 2.0
ROUTE_REFRESH_S = 5.0
ROUTES_PATH = "/apis/gateway.networking.k8s.io/v1/httproutes"
# Headers that belong to one connection (RFC 9110 §7.6.1), never passed on.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}
# Set by the gateway itself on the way upstream.
_REPLACED = {"host", "content-length", "x-forwarded-host", "x-forwarded-proto"}
# What the check's 2xx adds to the request upstream (Envoy Gateway's headersToBackend).
TO_BACKEND = ("Authorization",)
# What a refusal carries back to the browser.
TO_CLIENT = ("Location", "Set-Cookie", "Content-Type", "Cache-Control", "WWW-Authenticate")
MAX_BODY = 100 * 2**20
UPSTREAM_TIMEOUT_S = 60.0
ENDPOINT_LABEL = "starverse.io/endpoint"
COLD_START_TIMEOUT_S = 300.0
COLD_START_POLL_S = 0.05
ADMIN_PREFIX = "/__devgateway/"
# What the emulator's Service network answers while no pod behind a Service is Ready.
NO_READY_POD = b"no endpoints available"
# The endpoint's Service not made yet (the worker converges it just after the order): as for
# no Ready pod, the interceptor holds the request rather than fail it.
NO_SERVICE_YET = b"no Service "


@dataclass(frozen=True)
class Backend:
    namespace: str
    service: str
    port: int
    endpoint: bool = False


@dataclass
class HostStats:
    """One endpoint host's requests since the stats were last read."""

    concurrency: int = 0
    requests: int = 0
    tokens: int = 0
    latencies_ms: list[float] = field(default_factory=list)


class DevGateway:
    """The development gateway on ``host:port`` (0: any free port), checking with the console
    at ``auth_url`` and routing by the HTTPRoutes of the cluster at ``kube_url`` (the kube
    emulator). ``start()`` runs it in a thread of its own; ``serve()`` in the caller's loop."""

    def __init__(
        self,
        *,
        auth_url: str,
        kube_url: str,
        host: str = "127.0.0.1",
        port: int = 0,
        auth_cache_s: float = AUTH_CACHE_S,
        route_refresh_s: float = ROUTE_REFRESH_S,
        cold_start_timeout_s: float = COLD_START_TIMEOUT_S,
    ) -> None:
        self.auth_url = auth_url
        self.kube_url = kube_url.rstrip("/")
        self.host = host
        self.port = port
        self.auth_cache_s = auth_cache_s
        self.route_refresh_s = route_refresh_s
        self.cold_start_timeout_s = cold_start_timeout_s
        self.checks = 0  # authorization checks asked of the console
        self.hosts: dict[str, HostStats] = {}  # endpoint hosts' in-flight counts and stats
        self._allowed: dict[tuple[str, str, str], tuple[float, dict[str, str]]] = {}
        self._routes: dict[str, Backend] = {}
        self._routes_read_at = 0.0
        self._routes_lock: asyncio.Lock | None = None
        self._session: ClientSession | None = None
        self._runner: web.ServerRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._refresher: asyncio.Task[None] | None = None
        parts = urlsplit(self.kube_url)
        self._upstream = Upstream(parts.hostname or "127.0.0.1", parts.port or 80)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- running ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Listen, and begin reading the routes."""
        self._routes_lock = asyncio.Lock()
        self._session = ClientSession(
            connector=TCPConnector(limit=64), timeout=ClientTimeout(total=30, connect=5)
        )
        # the low-level server: every path is the instance's, no router needed
        loop = asyncio.get_running_loop()

        def request(
            message: Any, payload: Any, protocol: Any, writer: Any, task: Any
        ) -> web.BaseRequest:
            return web.BaseRequest(
                message, payload, protocol, writer, task, loop, client_max_size=MAX_BODY
            )

        server = web.Server(self._handle, request_factory=request, access_log=None)
        self._runner = web.ServerRunner(server, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self._refresher = asyncio.create_task(self._refresh_routes_forever())
        log.info(
            "gateway started url=%s auth=%s cluster=%s note=%s",
            self.url,
            self.auth_url,
            self.kube_url,
            '"development stand-in for the production proxy"',
        )

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        self._upstream.close()
        log.info("gateway stopped url=%s", self.url)

    def start(self) -> DevGateway:
        """Serve in a background thread until ``stop()``."""
        started = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.open())
            except BaseException as error:  # reported to start()'s caller
                failure.append(error)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.close())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="dev-gateway", daemon=True)
        self._thread.start()
        started.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop = self._thread = None

    def __enter__(self) -> DevGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- one request ------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        host = request.headers.get("Host", "")
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return _text(501, "The development gateway does not carry WebSockets.")
        if request.path.startswith(ADMIN_PREFIX) and host.split(":")[0] in (
            "127.0.0.1",
            "localhost",
        ):
            return self._admin(request.path[len(ADMIN_PREFIX) :])
        allowed = await self._authorize(request, host)
        if isinstance(allowed, web.StreamResponse):
            return allowed
        backend = await self._backend(host.split(":")[0].lower())
        if backend is None:
            return _text(502, "No route to this address yet: try again in a moment.")
        if backend.endpoint:
            return await self._intercept(request, host, backend, allowed)
        return await self._forward(request, host, backend, allowed)

    # --- inference endpoints: the KEDA interceptor's part -----------------------------------

    def _admin(self, what: str) -> web.Response:
        if what == "queue":
            counts = {h: {"concurrency": s.concurrency} for h, s in self.hosts.items()}
            return web.json_response(counts)
        if what == "stats":
            drained = {
                h: {
                    "concurrency": s.concurrency,
                    "requests": s.requests,
                    "tokens": s.tokens,
                    "latencies_ms": s.latencies_ms,
                }
                for h, s in self.hosts.items()
            }
            for stats in self.hosts.values():
                stats.requests, stats.tokens, stats.latencies_ms = 0, 0, []
            return web.json_response(drained)
        return _text(404, "Unknown development gateway page.")

    async def _intercept(
        self, request: web.BaseRequest, host: str, backend: Backend, added: dict[str, str]
    ) -> web.StreamResponse:
        """Count the request in flight for its host while it is held and served; hold it while
        the endpoint has no Ready replica (the autoscaler sees the count and starts one)."""
        hostname = host.split(":")[0].lower()
        stats = self.hosts.setdefault(hostname, HostStats())
        stats.concurrency += 1
        started = time.monotonic()
        try:
            message, head_only = await self._request_bytes(request, host, backend, added)
            while True:
                try:
                    status, headers, payload = await self._upstream.exchange(
                        message, head_only=head_only
                    )
                except (OSError, asyncio.IncompleteReadError, ValueError) as error:
                    log.warning("gateway.upstream_failed host=%s error=%s", host, error)
                    return _text(502, "The endpoint did not answer.")
                starting = (status == 503 and NO_READY_POD in payload) or (
                    status == 502 and NO_SERVICE_YET in payload
                )
                if not starting:
                    break
                if time.monotonic() - started > self.cold_start_timeout_s:
                    return _openai_error(
                        503,
                        "The endpoint is still starting (no replica is ready yet): retry in a "
                        "minute.",
                        "endpoint_starting",
                    )
                await asyncio.sleep(COLD_START_POLL_S)
        finally:
            stats.concurrency -= 1
        stats.requests += 1
        stats.latencies_ms.append(round((time.monotonic() - started) * 1000, 1))
        if len(stats.latencies_ms) > 10_000:
            del stats.latencies_ms[:5_000]
        if request.path.endswith("completions"):  # only these generate tokens
            stats.tokens += _completion_tokens(payload)
        return _response(status, headers, payload)

    async def _authorize(
        self, request: web.BaseRequest, host: str
    ) -> dict[str, str] | web.StreamResponse:
        """The headers to add upstream, or the console's refusal to hand back."""
        assert self._session is not None
        cookie = request.headers.get("Cookie", "")
        authorization = request.headers.get("Authorization", "")
        key = (host, cookie, authorization)
        now = time.monotonic()
        cached = self._allowed.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        self.checks += 1
        check_headers = {
            "X-Forwarded-Host": host,
            "X-Forwarded-Uri": request.raw_path,
            "X-Forwarded-Method": request.method,
            "X-Forwarded-Proto": "http",
        }
        if cookie:
            check_headers["Cookie"] = cookie
        if authorization:  # an endpoint's API key
            check_headers["Authorization"] = authorization
        try:
            async with self._session.get(
                self.auth_url, headers=check_headers, allow_redirects=False
            ) as answer:
                body = await answer.read()
                if 200 <= answer.status < 300:
                    added = {k: answer.headers[k] for k in TO_BACKEND if k in answer.headers}
                    if len(self._allowed) > 10_000:
                        self._allowed.clear()
                    self._allowed[key] = (now + self.auth_cache_s, added)
                    return added
                headers = CIMultiDict[str]()
                for name in TO_CLIENT:
                    for value in answer.headers.getall(name, []):
                        headers.add(name, value)
                return web.Response(status=answer.status, body=body, headers=headers)
        except (TimeoutError, ClientError) as error:
            log.warning("gateway.auth_unreachable url=%s error=%s", self.auth_url, error)
            return _text(502, "The console's authorization check cannot be reached.")

    async def _forward(
        self, request: web.BaseRequest, host: str, backend: Backend, added: dict[str, str]
    ) -> web.StreamResponse:
        message, head_only = await self._request_bytes(request, host, backend, added)
        try:
            status, headers, payload = await self._upstream.exchange(message, head_only=head_only)
        except (OSError, asyncio.IncompleteReadError, ValueError) as error:
            log.warning("gateway.upstream_failed host=%s error=%s", host, error)
            return _text(502, "The instance did not answer.")
        return _response(status, headers, payload)

    async def _request_bytes(
        self, request: web.BaseRequest, host: str, backend: Backend, added: dict[str, str]
    ) -> tuple[bytes, bool]:
        """The request as it goes upstream, to the Service's DNS name on the pod network."""
        lines = [f"{request.method} {request.raw_path} HTTP/1.1"]
        replaced = _REPLACED | {name.lower() for name in added}
        for name, value in request.headers.items():
            lowered = name.lower()
            if lowered in HOP_BY_HOP or lowered in replaced:
                continue
            lines.append(f"{name}: {value}")
        lines += [f"{name}: {value}" for name, value in added.items()]
        body = await request.read() if request.body_exists else b""
        lines += [
            f"Host: {backend.service}.{backend.namespace}.svc.cluster.local:{backend.port}",
            f"X-Forwarded-Host: {host}",
            "X-Forwarded-Proto: http",
            f"Content-Length: {len(body)}",
        ]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body, request.method == "HEAD"

    # --- routes -----------------------------------------------------------------------------

    async def _backend(self, hostname: str) -> Backend | None:
        """The Service port a host name is routed to; the routes are read again (at most a few
        times a second) when a name is missing: the worker may have just made its route."""
        found = self._routes.get(hostname)
        if found is not None:
            return found
        assert self._routes_lock is not None
        async with self._routes_lock:
            found = self._routes.get(hostname)  # another request may have just read them
            if found is not None:
                return found
            # a read of a moment ago may predate the route: wait out the quarter second, then
            # read again, rather than turn the request away
            wait = 0.25 - (time.monotonic() - self._routes_read_at)
            if wait > 0:
                await asyncio.sleep(wait)
            await self._read_routes()
        return self._routes.get(hostname)

    async def _read_routes(self) -> None:
        assert self._session is not None
        self._routes_read_at = time.monotonic()
        try:
            async with self._session.get(self.kube_url + ROUTES_PATH) as answer:
                listing: dict[str, Any] = await answer.json()
        except (TimeoutError, ClientError, ValueError) as error:
            log.warning("gateway.routes_unreadable cluster=%s error=%s", self.kube_url, error)
            return
        self._routes = routes_table(listing.get("items") or [])

    async def _refresh_routes_forever(self) -> None:
        while True:
            await self._read_routes()
            await asyncio.sleep(self.route_refresh_s)


class Upstream:
    """Kept-alive HTTP/1.1 connections to the cluster's pod network (the emulator), for the
    proxied requests: a request is written as it came, the answer read by its Content-Length,
    its chunks or the connection's end. Leaner than a general HTTP client, which at the
    development gateway's rates cost as much as the rest of a request."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def exchange(
        self, request: bytes, *, head_only: bool
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """(status, headers, body) of one request; a kept-alive connection the other side
        closed meanwhile is replaced once, when nothing of the answer came yet."""
        for attempt in (0, 1):
            reused = bool(self._idle)
            reader, writer = (
                self._idle.pop() if reused else await asyncio.open_connection(self.host, self.port)
            )
            try:
                async with asyncio.timeout(UPSTREAM_TIMEOUT_S):
                    writer.write(request)
                    status_line = await reader.readline()
                    if not status_line:
                        raise ConnectionResetError("closed before answering")
                    status, headers, body, keep = await _read_answer(reader, status_line, head_only)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                writer.close()
                if reused and attempt == 0:
                    continue
                raise
            if keep:
                self._idle.append((reader, writer))
            else:
                writer.close()
            return status, headers, body
        raise ConnectionResetError("unreachable")  # the loop returns or raises

    def close(self) -> None:
        for _reader, writer in self._idle:
            writer.close()
        self._idle.clear()


async def _read_answer(
    reader: asyncio.StreamReader, status_line: bytes, head_only: bool
) -> tuple[int, list[tuple[str, str]], bytes, bool]:
    version, _sp, rest = status_line.decode("latin-1").partition(" ")
    status = int(rest.split(" ", 1)[0])
    headers: list[tuple[str, str]] = []
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _colon, value = line.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))
    fields = {name.lower(): value for name, value in headers}
    keep = fields.get("connection", "").lower() != "close" and version == "HTTP/1.1"
    if head_only or status in (204, 304) or 100 <= status < 200:
        return status, headers, b"", keep
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return status, headers, bytes(body), keep
            body += await reader.readexactly(size)
            await reader.readline()
    if "content-length" in fields:
        return status, headers, await reader.readexactly(int(fields["content-length"])), keep
    return status, headers, await reader.read(), False


def routes_table(routes: list[dict[str, Any]]) -> dict[str, Backend]:
    """Host name → the Service port of the first backend of the first rule, per HTTPRoute."""
    table: dict[str, Backend] = {}
    for route in routes:
        spec, meta = route.get("spec") or {}, route.get("metadata") or {}
        backends = [b for rule in spec.get("rules") or [] for b in rule.get("backendRefs") or []]
        if not backends or not isinstance(backends[0].get("port"), int):
            continue
        first = backends[0]
        backend = Backend(
            first.get("namespace") or meta.get("namespace", ""),
            first["name"],
            first["port"],
            endpoint=ENDPOINT_LABEL in (meta.get("labels") or {}),
        )
        for hostname in spec.get("hostnames") or []:
            table[str(hostname).lower()] = backend
    return table


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


def _response(status: int, headers: list[tuple[str, str]], payload: bytes) -> web.Response:
    back = CIMultiDict[str]()
    for name, value in headers:
        if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
            back.add(name, value)
    return web.Response(status=status, body=payload, headers=back)


def _openai_error(status: int, message: str, code: str) -> web.Response:
    error = {"message": message, "type": "server_error", "param": None, "code": code}
    return web.json_response({"error": error}, status=status)


def _completion_tokens(payload: bytes) -> int:
    """The tokens an OpenAI-style answer says it generated (0 when it says nothing)."""
    if not payload.startswith(b"{"):
        return 0
    try:
        usage = json.loads(payload).get("usage") or {}
        return int(usage.get("completion_tokens") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0
