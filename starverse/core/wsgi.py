"""A request body that the application answered without reading — a 413 judged by its
Content-Length, a 401 before the view looks at the body — is read and dropped before the answer
goes out, up to UNREAD_BODY_MAX_BYTES. The client, which sends the whole body before it reads,
then gets the answer, and its next request on the same keep-alive connection is served.

Servers do not do this for the application: gunicorn discards at most 64 KiB of an unread body
and otherwise closes the connection after a response that announced keep-alive, which a client
still sending sees as a reset. A larger body is left to the server, which closes the connection
(WSGI lets no application set `Connection: close`). Only bodies with a Content-Length are read:
PEP 3333 forbids reading past it, and a chunked body has none."""

from collections.abc import Iterable, Iterator
from typing import Protocol
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

# Four times the default body limit (DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB): a refused upload
# of a sensible size keeps its connection; reading costs the worker thread no more than that.
UNREAD_BODY_MAX_BYTES = 10 * 2**20
CHUNK_BYTES = 64 * 2**10


class _Input(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...
    def readline(self, size: int = ..., /) -> bytes: ...
    def readlines(self, hint: int = ..., /) -> list[bytes]: ...
    def __iter__(self) -> Iterator[bytes]: ...


class CountingInput:
    """wsgi.input as the application sees it, counting the bytes it read."""

    def __init__(self, stream: _Input) -> None:
        self._stream = stream
        self.consumed = 0

    def _count(self, data: bytes) -> bytes:
        self.consumed += len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self._count(self._stream.read())
        return self._count(self._stream.read(size))

    def readline(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self._count(self._stream.readline())
        return self._count(self._stream.readline(size))

    def readlines(self, hint: int = -1) -> list[bytes]:
        return [self._count(line) for line in self._stream.readlines(hint)]

    def __iter__(self) -> Iterator[bytes]:
        return (self._count(line) for line in self._stream)


def _content_length(environ: WSGIEnvironment) -> int:
    try:
        return max(0, int(environ.get("CONTENT_LENGTH") or 0))
    except ValueError:
        return 0


def _drain(stream: CountingInput, left: int) -> None:
    try:
        while left > 0:
            chunk = stream.read(min(CHUNK_BYTES, left))
            if not chunk:
                return
            left -= len(chunk)
    except OSError:  # the client went away: the server finds out when it answers
        return


def drain_unread_body(app: WSGIApplication) -> WSGIApplication:
    """`app`, reading what it left of a request body of up to UNREAD_BODY_MAX_BYTES before its
    answer is sent (the module docstring says why)."""

    def application(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        length = _content_length(environ)
        if not length:
            return app(environ, start_response)
        counted = CountingInput(environ["wsgi.input"])
        environ["wsgi.input"] = counted
        answer = app(environ, start_response)
        left = length - counted.consumed
        if left <= UNREAD_BODY_MAX_BYTES:
            _drain(counted, left)
        return answer

    return application
