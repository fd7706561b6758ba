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
not carry WebSockets (nothing in an emulated pod speaks them). Development only: no TLS. The
HTTP on both sides, the clients' and the pod network's, is devstack.gateway.wire's.

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
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector

from .wire import Reply, Request, Server, Upstream, http_date
from .wire import json_reply as _json
from .wire import text_reply as _text

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
# Not passed back to the client: the gateway writes the body's length itself.
_NOT_PASSED = HOP_BY_HOP | {"content-length"}
# Methods whose requests carry no content unless they say so.
BODILESS = {"GET", "HEAD", "DELETE", "OPTIONS", "TRACE"}
# What the check's 2xx adds to the request upstream (Envoy Gateway's headersToBackend).
TO_BACKEND = ("Authorization",)
# What a refusal carries back to the browser.
TO_CLIENT = ("Location", "Set-Cookie", "Content-Type", "Cache-Control", "WWW-Authenticate")
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

    @cached_property
    def upstream_host(self) -> str:
        """The Service's name on the pod network, as cluster DNS has it."""
        return f"{self.service}.{self.namespace}.svc.cluster.local:{self.port}"


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
        self._server: Server | None = None
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
        # every path is the instance's: no router, one handler (devstack.gateway.wire)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(512)
        self.port = sock.getsockname()[1]
        self._server = Server(self._handle)
        await self._server.start(sock)
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
        if self._server is not None:
            await self._server.close()
        if self._session is not None:
            await self._session.close()
        await self._upstream.close()
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

    async def _handle(self, request: Request) -> Reply:
        host = request.header("host")
        hostname = host.partition(":")[0].lower()
        if request.header("upgrade").lower() == "websocket":
            return _text(501, "The development gateway does not carry WebSockets.")
        if hostname in ("127.0.0.1", "localhost") and request.path.startswith(ADMIN_PREFIX):
            return self._admin(request.path[len(ADMIN_PREFIX) :])
        allowed = await self._authorize(request, host)
        if isinstance(allowed, Reply):
            return allowed
        backend = self._routes.get(hostname) or await self._backend(hostname)
        if backend is None:
            return _text(502, "No route to this address yet: try again in a moment.")
        if backend.endpoint:
            return await self._intercept(request, host, backend, allowed)
        return await self._forward(request, host, backend, allowed)

    # --- inference endpoints: the KEDA interceptor's part -----------------------------------

    def _admin(self, what: str) -> Reply:
        if what == "queue":
            counts = {h: {"concurrency": s.concurrency} for h, s in self.hosts.items()}
            return _json(200, counts)
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
            return _json(200, drained)
        return _text(404, "Unknown development gateway page.")

    async def _intercept(
        self, request: Request, host: str, backend: Backend, added: dict[str, str]
    ) -> Reply:
        """Count the request in flight for its host while it is held and served; hold it while
        the endpoint has no Ready replica (the autoscaler sees the count and starts one)."""
        hostname = host.split(":")[0].lower()
        stats = self.hosts.setdefault(hostname, HostStats())
        stats.concurrency += 1
        started = time.monotonic()
        try:
            message, head_only = self._request_bytes(request, host, backend, added)
            while True:
                try:
                    status, headers, payload = await self._upstream.exchange(
                        message, head_only=head_only
                    )
                except (OSError, ValueError) as error:
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
        return _response(status, headers, payload, head_only)

    async def _authorize(self, request: Request, host: str) -> dict[str, str] | Reply:
        """The headers to add upstream, or the console's refusal to hand back."""
        assert self._session is not None
        cookie = request.header("cookie")
        authorization = request.header("authorization")
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
                headers = [
                    (name, value) for name in TO_CLIENT for value in answer.headers.getall(name, [])
                ]
                return Reply(answer.status, [*headers, ("Date", http_date())], body)
        except (TimeoutError, ClientError) as error:
            log.warning("gateway.auth_unreachable url=%s error=%s", self.auth_url, error)
            return _text(502, "The console's authorization check cannot be reached.")

    async def _forward(
        self, request: Request, host: str, backend: Backend, added: dict[str, str]
    ) -> Reply:
        message, head_only = self._request_bytes(request, host, backend, added)
        try:
            status, headers, payload = await self._upstream.exchange(message, head_only=head_only)
        except (OSError, ValueError) as error:
            log.warning("gateway.upstream_failed host=%s error=%s", host, error)
            return _text(502, "The instance did not answer.")
        return _response(status, headers, payload, head_only)

    def _request_bytes(
        self, request: Request, host: str, backend: Backend, added: dict[str, str]
    ) -> tuple[bytes, bool]:
        """The request as it goes upstream, to the Service's DNS name on the pod network; a
        request without a body and of a method that takes none gets no Content-Length (RFC
        9110 §8.6)."""
        replaced = _REPLACED | {name.lower() for name in added} if added else _REPLACED
        lines = [f"{request.method} {request.raw_path} HTTP/1.1"]
        lines += [
            f"{name}: {value}"
            for name, value in request.headers
            if name.lower() not in replaced and name.lower() not in HOP_BY_HOP
        ]
        lines += [f"{name}: {value}" for name, value in added.items()]
        lines.append(f"Host: {backend.upstream_host}")
        lines.append(f"X-Forwarded-Host: {host}")
        lines.append("X-Forwarded-Proto: http")
        body = request.body
        if body or request.method not in BODILESS:
            lines.append(f"Content-Length: {len(body)}")
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


def _response(
    status: int, headers: list[tuple[str, str]], payload: bytes, head_only: bool
) -> Reply:
    """The upstream's answer as the client gets it: its own headers less the connection's (a
    HEAD's Content-Length kept: it is the length a GET would have)."""
    dropped = HOP_BY_HOP if head_only else _NOT_PASSED
    return Reply(status, [(n, v) for n, v in headers if n.lower() not in dropped], payload)


def _openai_error(status: int, message: str, code: str) -> Reply:
    error = {"message": message, "type": "server_error", "param": None, "code": code}
    return _json(status, {"error": error})


def _completion_tokens(payload: bytes) -> int:
    """The tokens an OpenAI-style answer says it generated (0 when it says nothing)."""
    if not payload.startswith(b"{"):
        return 0
    try:
        usage = json.loads(payload).get("usage") or {}
        return int(usage.get("completion_tokens") or 0)
    except (ValueError, TypeError, AttributeError):
        return 0
