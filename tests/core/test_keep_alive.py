"""A body the API answers without reading leaves its keep-alive connection usable: served by
gunicorn as `make run` and the image serve it (starverse.wsgi, gthread workers), a client on one
connection sends a body over the limit (a 413 judged by Content-Length) or a 700 kB one without
credentials (a 401 before the body is looked at), reads the JSON answer, and its next request on
the same connection is answered (starverse.core.wsgi)."""

import http.client
import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from starverse.core.wsgi import UNREAD_BODY_MAX_BYTES, drain_unread_body
from tests.conftest import served_database_url

# the server reads the test database: the mark has pytest-django create it
pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
START_S = 60.0
# as bin/run and the image run it: gthread workers (--threads)
GUNICORN = [sys.executable, "-m", "gunicorn", "starverse.wsgi:application"]
GUNICORN_OPTIONS = ["--workers", "1", "--threads", "2"]
ROUTES = [
    ("POST", "/api/v1/ssh-keys"),
    ("POST", "/api/v1/tokens"),
    ("POST", "/api/v1/billing/topups"),
    ("POST", "/api/v1/disks"),
    ("PUT", "/api/v1/nas"),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serves(port: int) -> bool:
    try:
        probe = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        probe.request("GET", "/healthz")
        return probe.getresponse().status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def gunicorn(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """gunicorn serving starverse.wsgi on a free port, with the test settings and database;
    its port."""
    port = _free_port()
    log = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    env.update(DJANGO_SETTINGS_MODULE="starverse.settings.test", DATABASE_URL=served_database_url())
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*GUNICORN, *GUNICORN_OPTIONS, "--bind", f"127.0.0.1:{port}"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_S
        while not _serves(port):
            assert server.poll() is None, "gunicorn exited:\n" + log.read_text()
            assert time.monotonic() < deadline, "gunicorn did not serve:\n" + log.read_text()
            time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def _json_answer(conn: http.client.HTTPConnection, method: str, path: str, body: bytes) -> Any:
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    answer = conn.getresponse()
    assert not answer.will_close, "the server announced it closes the connection"
    return answer.status, json.loads(answer.read())


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1, (413, "too_large")),
        (700_000, (401, "not_authenticated")),
    ],
    ids=["over the limit", "700 kB without credentials"],
)
def test_an_unread_body_is_answered_and_the_connection_serves_the_next_request(
    gunicorn, method, path, size, expected
):
    conn = http.client.HTTPConnection("127.0.0.1", gunicorn, timeout=30)
    try:
        status, refusal = _json_answer(conn, method, path, b"x" * size)
        held = conn.sock

        assert (status, refusal["code"]) == expected
        assert _json_answer(conn, "GET", "/api/v1/offerings", b"") == (
            200,
            {"count": 0, "next": None, "previous": None, "results": []},
        )
        assert conn.sock is held  # the same connection, not a new one
    finally:
        conn.close()


def _answered(body: bytes, *, read: int = 0) -> tuple[int, list[bytes]]:
    """A view that reads `read` bytes of `body` and refuses it, behind drain_unread_body: how
    many bytes were left unread in the stream, and the answer."""
    stream = io.BytesIO(body)

    def view(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        environ["wsgi.input"].read(read)
        start_response("413 Content Too Large", [("Content-Type", "application/json")])
        return [b"{}"]

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
        return lambda data: None  # the write() callable, unused

    environ = {"CONTENT_LENGTH": str(len(body)), "wsgi.input": stream}
    answer = drain_unread_body(view)(environ, start_response)
    return len(body) - stream.tell(), list(answer)


def test_what_the_application_left_of_a_body_is_read_up_to_the_bound():
    assert _answered(b"x" * 700_000) == (0, [b"{}"])
    assert _answered(b"x" * 700_000, read=1000) == (0, [b"{}"])
    at_bound = b"x" * UNREAD_BODY_MAX_BYTES
    assert _answered(at_bound)[0] == 0
    # beyond the bound nothing more is read: the server closes the connection instead
    beyond = b"x" * (UNREAD_BODY_MAX_BYTES + 1001)
    assert _answered(beyond, read=1000)[0] == UNREAD_BODY_MAX_BYTES + 1
