"""Posting to a tenant's URL (webhooks and chat bots), the one module that does: to the address
the guard checked (events.guard.resolve, at each send), with a connect and read timeout, a
deadline for the whole answer and a cap on what is read of it, and no redirects followed, so a
slow or hostile receiver cannot hold a worker for long nor point it elsewhere."""

import time
from typing import NamedTuple

from django.conf import settings
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, Timeout
from urllib3.exceptions import HTTPError

from events.guard import AddressRefused, resolve

# What is kept of an answer, and what is read of it at most (the rest is dropped unread).
KEPT_BYTES = 1024
READ_BYTES = 64 * 1024


class Answer(NamedTuple):
    """What came back: the HTTP status (None: no answer), the first bytes, how long it took,
    and why it failed where it did (`retryable`: worth another attempt)."""

    status: int | None
    body: str
    duration_ms: int
    error: str
    retryable: bool

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _read_capped(response: object, deadline: float) -> bytes:
    kept = b""
    read = 0
    while read < READ_BYTES and time.monotonic() < deadline:
        chunk = response.read(4096)  # type: ignore[attr-defined]
        if not chunk:
            break
        read += len(chunk)
        kept = (kept + chunk)[:KEPT_BYTES]
    return kept


def post(url: str, body: bytes, headers: dict[str, str]) -> Answer:
    """POST `body` to `url`; never raises for what the receiver does."""
    started = time.monotonic()
    try:
        target = resolve(url)
    except AddressRefused as refused:
        return Answer(None, "", _ms_since(started), str(refused), retryable=False)
    timeout = Timeout(
        connect=settings.WEBHOOK_CONNECT_TIMEOUT_S, read=settings.WEBHOOK_READ_TIMEOUT_S
    )
    default_port = 443 if target.scheme == "https" else 80
    host_header = target.host if target.port == default_port else f"{target.host}:{target.port}"
    if target.scheme == "https":
        pool: HTTPConnectionPool = HTTPSConnectionPool(
            target.address,
            target.port,
            timeout=timeout,
            retries=False,
            server_hostname=target.host,
            assert_hostname=target.host,
        )
    else:
        pool = HTTPConnectionPool(target.address, target.port, timeout=timeout, retries=False)
    deadline = started + settings.WEBHOOK_TOTAL_TIMEOUT_S
    try:
        with pool:
            response = pool.urlopen(
                "POST",
                target.path,
                body=body,
                headers={**headers, "Host": host_header, "Content-Type": "application/json"},
                redirect=False,
                preload_content=False,
                assert_same_host=False,
            )
            kept = _read_capped(response, deadline)
            response.close()  # the rest unread: the connection is not reused
    except HTTPError as error:
        return Answer(None, "", _ms_since(started), type(error).__name__, retryable=True)
    status = response.status
    text = kept.decode("utf-8", "replace")
    if 200 <= status < 300:
        return Answer(status, text, _ms_since(started), "", retryable=False)
    # a redirect is not followed: it fails like any other answer that is not 2xx
    retryable = status >= 500 or status in (408, 429)
    return Answer(status, text, _ms_since(started), f"HTTP {status}", retryable=retryable)
