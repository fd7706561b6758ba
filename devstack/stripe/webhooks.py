"""Webhook events: records, Stripe-Signature signing and background delivery with retries."""

import copy
import hashlib
import hmac
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_RETRY_DELAYS: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0, 4.0)


def sign(payload: str, secret: str, timestamp: int | None = None) -> str:
    """The ``Stripe-Signature`` header value for ``payload``: ``t=<unix>,v1=<hex hmac>``."""
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{t}.{payload}".encode(), hashlib.sha256)
    return f"t={t},v1={mac.hexdigest()}"


@dataclass(frozen=True)
class DeliveryAttempt:
    at: float
    status_code: int | None
    error: str | None
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "status_code": self.status_code,
            "error": self.error,
            "duration_ms": self.duration_ms,
        }


@dataclass
class EventRecord:
    """One event the fake created. ``body`` is the exact JSON text delivered (and signed).

    ``status``: ``not_sent`` (delivery off or no webhook URL), ``pending`` (queued or being
    retried), ``delivered`` (a 2xx came back) or ``failed`` (every attempt failed)."""

    id: str
    type: str
    event: dict[str, Any]
    body: str
    stream: str
    status: str
    attempts: list[DeliveryAttempt] = field(default_factory=list)

    def snapshot(self) -> "EventRecord":
        return EventRecord(
            id=self.id,
            type=self.type,
            event=copy.deepcopy(self.event),
            body=self.body,
            stream=self.stream,
            status=self.status,
            attempts=list(self.attempts),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "status": self.status,
            "attempts": [attempt.to_dict() for attempt in self.attempts],
            "event": self.event,
        }


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Like Stripe, a redirect answer counts as a failed delivery."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())


class Dispatcher:
    """Delivers events in creation order within a stream (one checkout session and everything
    that hangs off it), streams in parallel, retrying failures after ``retry_delays``."""

    def __init__(
        self,
        *,
        url: Callable[[], str | None],
        secret: Callable[[], str],
        retry_delays: Sequence[float] = DEFAULT_RETRY_DELAYS,
        timeout: float = 5.0,
        log: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._url = url
        self._secret = secret
        self._retry_delays = tuple(retry_delays)
        self._timeout = timeout
        self._log = log
        self._cond = threading.Condition()
        self._queues: dict[str, deque[EventRecord]] = {}
        self._outstanding = 0
        self._stopping = threading.Event()

    def enqueue(self, record: EventRecord) -> None:
        with self._cond:
            record.status = "pending"
            self._outstanding += 1
            queue = self._queues.get(record.stream)
            if queue is not None:
                queue.append(record)
                return
            self._queues[record.stream] = deque([record])
        worker = threading.Thread(
            target=self._drain, args=(record.stream,), name="stripe-fake-webhooks", daemon=True
        )
        worker.start()

    @property
    def lock(self) -> threading.Condition:
        """Held while attempts and statuses change; take it to read them consistently."""
        return self._cond

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._outstanding == 0, timeout=timeout)

    def resume(self) -> None:
        self._stopping.clear()

    def stop(self) -> None:
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()

    def _drain(self, stream: str) -> None:
        while True:
            with self._cond:
                queue = self._queues[stream]
                if not queue:
                    del self._queues[stream]
                    return
                record = queue[0]
            self._deliver(record)
            with self._cond:
                queue.popleft()
                self._outstanding -= 1
                self._cond.notify_all()

    def _deliver(self, record: EventRecord) -> None:
        delays = (0.0, *self._retry_delays)
        for number, delay in enumerate(delays, start=1):
            if (delay and self._stopping.wait(delay)) or self._stopping.is_set():
                return  # shutting down: the event stays "pending"
            attempt = self._attempt(record)
            with self._cond:
                record.attempts.append(attempt)
                if attempt.ok:
                    record.status = "delivered"
                elif number == len(delays):
                    record.status = "failed"
            if self._log:
                self._log(
                    {
                        "kind": "webhook",
                        "event": record.id,
                        "type": record.type,
                        "attempt": number,
                        "status": attempt.status_code if attempt.status_code else "-",
                        "error": attempt.error or "-",
                        "duration_ms": attempt.duration_ms,
                    }
                )
            if attempt.ok:
                return

    def _attempt(self, record: EventRecord) -> DeliveryAttempt:
        started = time.time()
        url = self._url()
        if not url:
            return DeliveryAttempt(started, None, "no webhook URL configured", 0)
        request = urllib.request.Request(  # noqa: S310 - the configured local endpoint
            url,
            data=record.body.encode(),
            method="POST",
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks) local-fake",
                "Stripe-Signature": sign(record.body, self._secret()),
            },
        )
        status: int | None = None
        error: str | None = None
        try:
            with _OPENER.open(request, timeout=self._timeout) as response:
                status = response.status
                response.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            exc.close()
        except (OSError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        duration = int((time.time() - started) * 1000)
        return DeliveryAttempt(started, status, error, duration)
