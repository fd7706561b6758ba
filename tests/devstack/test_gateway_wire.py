"""The development gateway's HTTP/1.1 on the wire (devstack.gateway.wire), over real sockets:
the clients' side reads pipelined, chunked and 100-continue requests whole and answers them in
order, refuses what it cannot read unambiguously before any handler sees it; the upstream side
reads answers by length, chunks or the connection's end, and replaces a kept-alive connection
the other side closed. Then the interceptor's in-flight counts through the whole gateway."""

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

import pytest
import requests

from devstack.gateway import DevGateway
from devstack.gateway.wire import Reply, Request, Server, Upstream
from devstack.kube import KubeEmulator
from tests.stubs import StubServer


async def _echo(request: Request) -> Reply:
    body = json.dumps(
        {
            "method": request.method,
            "path": request.raw_path,
            "body": request.body.decode(),
            "host": request.header("host"),
        }
    ).encode()
    return Reply(200, [("Content-Type", "application/json"), ("X-Length", "7")], body)


def _run(coroutine: Coroutine[Any, Any, Any]) -> None:
    """asyncio.run in a thread of its own: a browser test that ran earlier in this worker
    leaves Playwright's event loop running on the main thread, where asyncio.run refuses."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coroutine)
        except BaseException as error:  # re-raised in the test's thread
            failure.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _serve(
    scenario: Callable[[int, list[Request]], Awaitable[None]],
    handler: Callable[[Request], Awaitable[Reply]] = _echo,
) -> list[Request]:
    """Run `scenario(port, seen)` against a wire.Server whose handler records each request."""
    seen: list[Request] = []

    async def recording(request: Request) -> Reply:
        seen.append(request)
        return await handler(request)

    async def main() -> None:
        import socket

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        server = Server(recording)
        await server.start(sock)
        try:
            await asyncio.wait_for(scenario(sock.getsockname()[1], seen), 10)
        finally:
            await server.close()

    _run(main())
    return seen


async def _answer(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in head[1:] if line)
    return head[0], fields, await reader.readexactly(int(fields["Content-Length"]))


def test_pipelined_requests_are_answered_in_order_on_one_connection():
    answers: list[Any] = []

    async def scenario(port: int, seen: list[Request]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /a?x=1 HTTP/1.1\r\nHost: one\r\n\r\n"
            b"POST /b HTTP/1.1\r\nHost: two\r\nContent-Length: 5\r\n\r\nhello"
            b"HEAD /c HTTP/1.1\r\nHost: three\r\n\r\n"
        )
        answers.append(await _answer(reader))
        answers.append(await _answer(reader))
        head = await reader.readuntil(b"\r\n\r\n")
        answers.append(head.decode())
        writer.close()

    seen = _serve(scenario)

    assert [(r.method, r.raw_path, r.body) for r in seen] == [
        ("GET", "/a?x=1", b""),
        ("POST", "/b", b"hello"),
        ("HEAD", "/c", b""),
    ]
    assert answers[0][0] == "HTTP/1.1 200 OK"
    assert json.loads(answers[0][2])["host"] == "one"
    assert json.loads(answers[1][2]) == {
        "method": "POST",
        "path": "/b",
        "body": "hello",
        "host": "two",
    }
    # a HEAD's answer: the length the GET would have, no body (the next bytes would be another
    # answer's)
    assert answers[2].startswith("HTTP/1.1 200 OK\r\n")
    assert "Content-Length: " in answers[2]


def test_a_chunked_body_after_100_continue():
    answers: list[Any] = []

    async def scenario(port: int, seen: list[Request]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"PUT /up HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        answers.append(await reader.readuntil(b"\r\n\r\n"))
        for piece in (b"4\r\nWiki\r\n", b"5;ext=1\r\npedia\r\n", b"0\r\nX-Trailer: t\r\n\r\n"):
            writer.write(piece)
            await writer.drain()
        answers.append(await _answer(reader))
        writer.close()

    seen = _serve(scenario)

    assert answers[0] == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert [r.body for r in seen] == [b"Wikipedia"]
    assert json.loads(answers[1][2])["body"] == "Wikipedia"


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n", 400),
        (b"GET /\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * (64 * 2**10) + b"\r\n\r\n", 431),
        (b"POST / HTTP/1.1\r\nContent-Length: " + str(101 * 2**20).encode() + b"\r\n\r\n", 413),
    ],
)
def test_a_request_it_cannot_read_unambiguously_is_refused_and_its_connection_closed(
    request_bytes: bytes, status: int
):
    answers: list[Any] = []

    async def scenario(port: int, seen: list[Request]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes)
        answers.append(await _answer(reader))
        answers.append(await reader.read())  # the gateway closed the connection
        writer.close()

    seen = _serve(scenario)

    assert seen == []
    assert answers[0][0].split(" ")[1] == str(status)
    assert answers[0][1]["Connection"] == "close"
    assert answers[1] == b""


def test_http_1_0_closes_after_its_answer_unless_kept_alive():
    answers: list[Any] = []

    async def scenario(port: int, seen: list[Request]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /kept HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        answers.append(await _answer(reader))
        writer.write(b"GET /closed HTTP/1.0\r\n\r\n")
        answers.append(await _answer(reader))
        answers.append(await reader.read())
        writer.close()

    seen = _serve(scenario)

    assert [r.raw_path for r in seen] == ["/kept", "/closed"]
    assert answers[0][1]["Connection"] == "keep-alive"
    assert answers[1][1]["Connection"] == "close"
    assert answers[2] == b""


class _Upstream:
    """A pod on the pod network that answers each request with the next of `answers` (raw
    bytes), closing the connection after one marked `close`."""

    def __init__(self, answers: list[tuple[bytes, bool]]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0

    async def start(self) -> int:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.server = server
        return int(server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while self.answers:
            try:
                self.requests.append(await reader.readuntil(b"\r\n\r\n"))
            except asyncio.IncompleteReadError:
                break
            answer, close = self.answers.pop(0)
            writer.write(answer)
            await writer.drain()
            if close:
                break
        writer.close()


def test_upstream_answers_by_length_chunks_or_the_connections_end_and_a_closed_one_is_replaced():
    results: list[Any] = []

    async def main() -> None:
        pod = _Upstream(
            [
                (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\n\r\nok", False),
                (
                    b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                    True,  # then the pod closes the kept-alive connection
                ),
                (b"HTTP/1.1 204 No Content\r\n\r\n", False),
                (b"HTTP/1.0 200 OK\r\n\r\nto the end", True),
            ]
        )
        upstream = Upstream("127.0.0.1", await pod.start())
        request = b"GET / HTTP/1.1\r\nHost: svc\r\n\r\n"
        try:
            for _ in range(4):
                results.append(await upstream.exchange(request, head_only=False))
        finally:
            await upstream.close()
            pod.server.close()
        results.append(pod.connections)

    _run(main())

    assert results[0] == (200, [("Content-Length", "2"), ("X-A", "1")], b"ok")
    assert results[1] == (201, [("Transfer-Encoding", "chunked")], b"abcde")
    assert results[2] == (204, [], b"")
    assert results[3] == (200, [], b"to the end")
    assert results[4] == 2  # the closed connection replaced once, before the third request


def test_upstream_gives_up_an_answer_that_does_not_come_in_time():
    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # never answers

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        upstream = Upstream("127.0.0.1", int(server.sockets[0].getsockname()[1]), timeout_s=0.2)
        try:
            with pytest.raises(TimeoutError):
                await upstream.exchange(b"GET / HTTP/1.1\r\nHost: s\r\n\r\n", head_only=False)
        finally:
            await upstream.close()
            server.close()

    _run(asyncio.wait_for(main(), 5))


# --- the whole gateway: the interceptor's in-flight counts -----------------------------------

HOST = "ep-wire.localhost"


class Console:
    """A stand-in for the console's /gateway/auth: the key `sk-good` passes."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.stub = StubServer(self._answer, "/gateway/auth")
        self.url = self.stub.url

    def _answer(self, headers: Any) -> tuple[int, bytes]:
        self.asked.append(headers.get("Authorization", ""))
        if headers.get("Authorization") == "Bearer sk-good":
            return 200, b""
        return 401, b'{"error": {"code": "invalid_api_key"}}'


@pytest.fixture
def console() -> Iterator[Console]:
    running = Console()
    yield running
    running.stub.close()


def test_held_requests_count_in_flight_until_answered_and_refused_ones_never(
    cluster: KubeEmulator, console: Console
):
    cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "ep-wire", "namespace": "default"},
                "spec": {"selector": {"app": "none"}, "ports": [{"port": 8000}]},
            },
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {
                    "name": "ep-wire",
                    "namespace": "default",
                    "labels": {"starverse.io/endpoint": "ep-wire"},
                },
                "spec": {
                    "hostnames": [HOST],
                    "rules": [{"backendRefs": [{"name": "ep-wire", "port": 8000}]}],
                },
            },
        ]
    )
    with DevGateway(
        auth_url=console.url, kube_url=cluster.url, cold_start_timeout_s=1.5
    ) as gateway:

        def call(key: str, answers: list[requests.Response]) -> None:
            answers.append(
                requests.get(
                    gateway.url + "/v1/models",
                    headers={"Host": HOST, "Authorization": f"Bearer {key}"},
                    timeout=10,
                )
            )

        def queue() -> dict[str, Any]:
            return requests.get(gateway.url + "/__devgateway/queue", timeout=5).json()

        refused: list[requests.Response] = []
        call("sk-bad", refused)
        assert refused[0].status_code == 401
        assert queue() == {}  # refused before the interceptor: never counted, never held

        held: list[requests.Response] = []
        threads = [threading.Thread(target=call, args=("sk-good", held)) for _ in range(3)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 5
        while queue() != {HOST: {"concurrency": 3}}:
            assert time.monotonic() < deadline, queue()
            time.sleep(0.02)
        for thread in threads:
            thread.join()
        assert [a.status_code for a in held] == [503, 503, 503]
        assert {a.json()["error"]["code"] for a in held} == {"endpoint_starting"}
        assert queue() == {HOST: {"concurrency": 0}}
        # each request was checked with the console (the 3 at once: before any answer was kept)
        assert console.asked[0] == "Bearer sk-bad"
        assert set(console.asked[1:]) == {"Bearer sk-good"}
