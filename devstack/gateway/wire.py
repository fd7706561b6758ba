"""HTTP/1.1 on the wire for the development gateway: the clients' side (a lean server protocol)
and kept-alive connections to the cluster's pod network (the upstream).

Both sides parse the bytes as they arrive in a protocol's ``data_received`` and hand a whole
request, or a whole answer, to one coroutine: no stream reader and no coroutine per line in
between. At the gateway's rates a general-purpose HTTP server and client cost more than the
rest of a request (``python -m bench endpoints``, endpoint_gateway_overhead).

What the server side accepts: HTTP/1.0 and 1.1, keep-alive and pipelined requests (answered in
order), bodies by Content-Length or chunked (with ``Expect: 100-continue``), heads up to
MAX_HEAD and bodies up to MAX_BODY. A request it cannot read unambiguously (no or a bad request
line, a header without a name, folded headers, Content-Length with Transfer-Encoding, two
different lengths) is answered 400 and its connection closed, as is a head or body over the
limits (431, 413). Development only: no TLS, no HTTP/2.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import unquote

log = logging.getLogger("devstack.gateway")
MAX_HEAD = 64 * 2**10
MAX_BODY = 100 * 2**20
KEEPALIVE_S = 75.0  # an idle client connection is closed after this long
UPSTREAM_TIMEOUT_S = 60.0
SWEEP_S = 1.0  # how often idle connections and late answers are looked for
Headers = list[tuple[str, str]]
Answer = tuple[int, Headers, bytes, bool]  # status, headers, body, kept alive


class BadMessage(ValueError):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def status_line(status: int) -> str:
    try:
        return f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP/1.1 {status} Unknown"


_STATUS_LINES: dict[int, str] = {int(status): status_line(status) for status in HTTPStatus}
_date: list[object] = [0, ""]


def http_date() -> str:
    """Now, as the Date header says it (formatted once a second)."""
    now = int(time.time())
    if _date[0] != now:
        _date[:] = [now, formatdate(now, usegmt=True)]
    return str(_date[1])


class Request:
    """One request as the client sent it, its body read whole."""

    __slots__ = ("_fields", "body", "headers", "keep_alive", "method", "raw_path", "version")

    def __init__(
        self, method: str, raw_path: str, version: str, headers: Headers, body: bytes
    ) -> None:
        self.method, self.raw_path, self.version = method, raw_path, version
        self.headers, self.body = headers, body
        self._fields: dict[str, str] = {}
        for name, value in headers:
            self._fields.setdefault(name.lower(), value)
        connection = self._fields.get("connection", "").lower()
        self.keep_alive = (
            "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        )

    def header(self, name: str, default: str = "") -> str:
        """The first value of a header (its name in lower case)."""
        return self._fields.get(name, default)

    @property
    def path(self) -> str:
        path = self.raw_path.partition("?")[0]
        return unquote(path) if "%" in path else path


class Reply:
    """What goes back to the client: its body whole, Content-Length added on the way."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Headers, body: bytes = b"") -> None:
        self.status, self.headers, self.body = status, headers, body

    def encode(self, *, head_only: bool, keep_alive: bool, version: str) -> bytes:
        lines = [_STATUS_LINES.get(self.status) or status_line(self.status)]
        lines += [f"{name}: {value}" for name, value in self.headers]
        if not (head_only and any(n.lower() == "content-length" for n, _v in self.headers)):
            lines.append(f"Content-Length: {len(self.body)}")
        if not keep_alive:
            lines.append("Connection: close")
        elif version == "HTTP/1.0":
            lines.append("Connection: keep-alive")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


Handler = Callable[[Request], Awaitable[Reply]]


def read_chunks(buffer: bytearray, at: int, body: bytearray) -> tuple[int, bool]:
    """Chunked content from `at` in `buffer` onto `body`: (where to go on from, whether the
    last chunk and the trailers, which are dropped, are in)."""
    while True:
        eol = buffer.find(b"\r\n", at)
        if eol < 0:
            return at, False
        size_field = bytes(buffer[at:eol]).split(b";")[0].strip()
        if not size_field or not all(c in b"0123456789abcdefABCDEF" for c in size_field):
            raise BadMessage(400, "a bad chunk size")
        size = int(size_field, 16)
        if size == 0:
            end = buffer.find(b"\r\n\r\n", eol)  # the trailers' end
            if end < 0:
                return at, False
            return end + 4, True
        end = eol + 2 + size
        if len(buffer) < end + 2:
            return at, False
        if buffer[end : end + 2] != b"\r\n":
            raise BadMessage(400, "a chunk longer than its size")
        body += buffer[eol + 2 : end]
        at = end + 2


def _parse_fields(lines: list[str]) -> Headers:
    headers: Headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or name[0] in " \t":
            raise BadMessage(400, "a malformed header line")
        headers.append((name, value.strip(" \t")))
    return headers


# --- the clients' side ----------------------------------------------------------------------


class ServerConnection(asyncio.Protocol):
    """One client's connection: requests are read whole, handled one at a time in order, and
    each answer written in one piece."""

    def __init__(
        self,
        handler: Handler,
        connections: set[ServerConnection],
        tasks: set[asyncio.Task[None]],
    ) -> None:
        self.handler = handler
        self.connections = connections
        self.tasks = tasks  # the requests being handled, the server's whole
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.busy = False  # a request is being handled
        self.idle_since = time.monotonic()
        self._paused = False
        self._continued = False  # "100 Continue" said for the request being read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.busy:
            if len(self.buffer) > MAX_HEAD + MAX_BODY and not self._paused:
                self._paused = True
                assert self.transport is not None
                self.transport.pause_reading()
            return
        self._next()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _next(self) -> None:
        """Start handling the next whole request in the buffer, if there is one."""
        try:
            request = self._parse()
        except BadMessage as error:
            self._write(text_reply(error.status, str(error)), None)
            return
        if request is None:
            return
        self.busy = True
        task = asyncio.get_running_loop().create_task(self._serve(request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve(self, request: Request) -> None:
        try:
            reply = await self.handler(request)
        except Exception:  # a bug in the gateway: the client gets a 500, the log the cause
            log.exception("gateway.handler_failed path=%s", request.raw_path)
            reply = text_reply(500, "The development gateway failed on this request.")
        self._write(reply, request)

    def _write(self, reply: Reply, request: Request | None) -> None:
        transport = self.transport
        keep = request is not None and request.keep_alive
        if transport is not None and not transport.is_closing():
            transport.write(
                reply.encode(
                    head_only=request is not None and request.method == "HEAD",
                    keep_alive=keep,
                    version=request.version if request is not None else "HTTP/1.1",
                )
            )
            if not keep:
                transport.close()
        self.busy = False
        self.idle_since = time.monotonic()
        if not keep or self.transport is None:
            return
        if self._paused:
            self._paused = False
            self.transport.resume_reading()
        if self.buffer:
            self._next()

    def _parse(self) -> Request | None:
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD:
                raise BadMessage(431, "The request's head is too large.")
            return None
        if end > MAX_HEAD:
            raise BadMessage(431, "The request's head is too large.")
        lines = buffer[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith("HTTP/1."):
            raise BadMessage(400, "A malformed request line.")
        method, raw_path, version = parts
        headers = _parse_fields(lines[1:])
        lengths = {v for n, v in headers if n.lower() == "content-length"}
        codings = [v.lower() for n, v in headers if n.lower() == "transfer-encoding"]
        at = end + 4
        if codings:
            if lengths or codings != ["chunked"]:
                raise BadMessage(400, "An ambiguous request length.")
            body = bytearray()
            self._continue(headers, at)
            at, complete = read_chunks(buffer, at, body)
            if len(body) > MAX_BODY:
                raise BadMessage(413, "The request's body is too large.")
            if not complete:
                return None
            content = bytes(body)
        else:
            if len(lengths) > 1 or not all(v.isdigit() for v in lengths):
                raise BadMessage(400, "A bad Content-Length.")
            length = int(next(iter(lengths))) if lengths else 0
            if length > MAX_BODY:
                raise BadMessage(413, "The request's body is too large.")
            if len(buffer) < at + length:
                self._continue(headers, at)
                return None
            content = bytes(buffer[at : at + length])
            at += length
        del buffer[:at]
        self._continued = False
        return Request(method.upper(), raw_path, version, headers, content)

    def _continue(self, headers: Headers, at: int) -> None:
        """``Expect: 100-continue``: say so once, when the body has not started coming."""
        if self._continued or len(self.buffer) > at or self.transport is None:
            return
        if any(n.lower() == "expect" and v.lower() == "100-continue" for n, v in headers):
            self._continued = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")


def text_reply(status: int, text: str) -> Reply:
    """A plain-text answer of the gateway's own."""
    return Reply(
        status,
        [("Content-Type", "text/plain; charset=utf-8"), ("Date", http_date())],
        (text + "\n").encode(),
    )


def json_reply(status: int, document: object) -> Reply:
    """A JSON answer of the gateway's own."""
    return Reply(
        status,
        [("Content-Type", "application/json; charset=utf-8"), ("Date", http_date())],
        json.dumps(document).encode(),
    )


class Server:
    """The clients' side on a bound socket, each request given to `handler`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections: set[ServerConnection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self.handler, self.connections, self.tasks), sock=sock
        )
        self._sweeper = loop.create_task(self._sweep())

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            stale = time.monotonic() - KEEPALIVE_S
            for connection in [c for c in self.connections if not c.busy]:
                if connection.idle_since < stale:
                    connection.close()

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._server is not None:
            self._server.close()
            for task in list(self.tasks):  # requests still held (a cold start) end here
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()


# --- the upstream side ----------------------------------------------------------------------


class UpstreamConnection(asyncio.Protocol):
    """One kept-alive connection to the pod network. The answer to the request written last is
    parsed off the bytes as they arrive and handed whole to the exchange waiting for it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.received = False  # a byte of the current answer came
        self.deadline = 0.0  # (the loop's clock) when the current answer is given up
        self._waiter: asyncio.Future[Answer] | None = None
        self._head_only = False
        self._head: tuple[int, Headers, bool] | None = None  # status, headers, keep
        self._length: int | None = None  # the body's bytes; None: chunked, or to the end
        self._chunked = False
        self._at = 0  # where the body, or the next chunk's size line, starts in the buffer
        self._body = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self._waiter is None:
            return
        self.received = True
        try:
            self._advance()
        except ValueError as error:
            self.fail(error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None:
            return
        if self._head is not None and self._length is None and not self._chunked:
            status, headers, _keep = self._head  # a body that ends with the connection
            self._done(status, headers, bytes(self.buffer[self._at :]), False)
        else:
            self._fail(ConnectionResetError("closed before the end of the answer"))

    def send(self, request: bytes, waiter: asyncio.Future[Answer], *, head_only: bool) -> None:
        assert self.transport is not None
        self.buffer.clear()
        self.received, self._waiter, self._head_only = False, waiter, head_only
        self._head, self._length, self._chunked, self._at = None, None, False, 0
        self._body = bytearray()
        self.transport.write(request)

    def fail(self, error: Exception) -> None:
        """Give up the answer being waited for, and the connection with it."""
        self._fail(error)
        self.abort()

    def abort(self) -> None:
        self.closed = True
        self._waiter = None
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def _done(self, status: int, headers: Headers, body: bytes, keep: bool) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((status, headers, body, keep))

    def _advance(self) -> None:
        if self._head is None and not self._read_head():
            return
        assert self._head is not None
        status, headers, keep = self._head
        if self._length is not None:
            end = self._at + self._length
            if len(self.buffer) >= end:
                self._done(status, headers, bytes(self.buffer[self._at : end]), keep)
        elif self._chunked:
            self._at, complete = read_chunks(self.buffer, self._at, self._body)
            if complete:
                self._done(status, headers, bytes(self._body), keep)

    def _read_head(self) -> bool:
        """The status line and the headers, once they are all in; False until then, or when
        the answer has no body (then it is done)."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                raise ValueError("the answer's head is too long")
            return False
        lines = self.buffer[:end].decode("latin-1").split("\r\n")
        version, _sp, rest = lines[0].partition(" ")
        status = int(rest[:3])
        keep = version == "HTTP/1.1"
        headers = _parse_fields(lines[1:])
        length: int | None = None
        for name, value in headers:
            lowered = name.lower()
            if lowered == "content-length":
                length = int(value)
            elif lowered == "transfer-encoding":
                self._chunked = "chunked" in value.lower()
            elif lowered == "connection":
                keep = keep and "close" not in value.lower()
        self._at = end + 4
        if self._head_only or status in (204, 304) or 100 <= status < 200:
            self._head = (status, headers, keep)
            self._done(status, headers, b"", keep)
            return False
        if not self._chunked:
            self._length = length
        # without a length the body runs to the connection's end (connection_lost)
        self._head = (status, headers, keep and (self._chunked or length is not None))
        return True


class Upstream:
    """Kept-alive HTTP/1.1 connections to the cluster's pod network (the emulator), for the
    proxied requests: a request is written as it came, the answer read by its Content-Length,
    its chunks or the connection's end. An answer not whole within `timeout_s` is given up (a
    sweep once a second, not a timer per request)."""

    def __init__(self, host: str, port: int, *, timeout_s: float = UPSTREAM_TIMEOUT_S) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self._idle: list[UpstreamConnection] = []
        self._busy: set[UpstreamConnection] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def exchange(self, request: bytes, *, head_only: bool) -> tuple[int, Headers, bytes]:
        """(status, headers, body) of one request; a kept-alive connection the other side
        closed meanwhile is replaced once, when nothing of the answer came yet."""
        loop = asyncio.get_running_loop()
        if self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep())
        for attempt in (0, 1):
            connection = self._take()
            reused = connection is not None
            if connection is None:
                _transport, connection = await loop.create_connection(
                    UpstreamConnection, self.host, self.port
                )
            waiter: asyncio.Future[Answer] = loop.create_future()
            connection.deadline = loop.time() + self.timeout_s
            self._busy.add(connection)
            try:
                connection.send(request, waiter, head_only=head_only)
                status, headers, body, keep = await waiter
            except (OSError, ValueError):
                connection.abort()
                if reused and attempt == 0 and not connection.received:
                    continue
                raise
            except BaseException:  # cancelled: the answer may still come, on no one's watch
                connection.abort()
                raise
            finally:
                self._busy.discard(connection)
            if keep and not connection.closed:
                self._idle.append(connection)
            else:
                connection.abort()
            return status, headers, body
        raise ConnectionResetError("unreachable")  # the loop returns or raises

    def _take(self) -> UpstreamConnection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        return None

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(SWEEP_S, self.timeout_s))
            now = loop.time()
            for connection in [c for c in self._busy if c.deadline < now]:
                connection.fail(TimeoutError("the upstream did not answer in time"))

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for connection in self._idle:
            connection.abort()
        self._idle.clear()
