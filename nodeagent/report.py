"""The node report contract, and the reporter that delivers reports to the platform.

    POST {platform}/api/v1/nodes/{node}/report
    Authorization: Bearer <node token>
    Content-Type: application/json

    {"agent_version": "0.1.0", "node": "gpu-h100-01", "sent_at": "2026-11-29T21:00:15Z",
     "driver": {"driver_version": "550.54.15", "cuda_version": "12.4",
                "nvml_version": "12.550.54.15"},
     "inventory": [{"index": 0, "uuid": "GPU-…", "pci_bus_id": "00000000:18:00.0",
                    "product": "NVIDIA H100 80GB HBM3", "serial": "…"|null, "vbios": "…"|null,
                    "memory_total_mb": 81559, "nvlink_links": 18|null}],
     "samples": [{"at": "2026-11-29T21:00:15Z",
                  "gpus": [{"index": 0, "uuid": "GPU-…",
                            "metrics": {"DCGM_FI_DEV_GPU_UTIL": 87, …}}]}],
     "events": [{"at": "…", "type": "xid", "gpu": 3, "uuid": "GPU-…", "xid": 79,
                 "message": "XID 79: GPU has fallen off the bus"}],
     "lost_gpus": [{"index": 5, "uuid": "GPU-…"|null, "pci_bus_id": "…"|null,
                    "error": "GpuIsLost"}],
     "dropped_reports": 0}

  * `metrics` holds every name of `nodeagent.metrics.METRIC_NAMES`, each a number or null.
  * `samples` holds one entry per sampling instant, oldest first: more than one when a backlog
    built while the platform was unreachable is delivered merged (at most `MAX_SAMPLES`).
    `inventory`, `driver` and `lost_gpus` are those of the newest sample; `events` are all the
    events of the merged reports, oldest first.
  * Times are UTC, ISO 8601, whole seconds, with `Z`.
  * `dropped_reports`: reports this agent has dropped since it started because its backlog was
    full (a counter: it only grows while the agent runs).
  * The platform answers 202 {"accepted_samples": n, "refused": [{gpu, field, reason}]} (metrics
    out of their range, stored as null); 400 {"detail", "code"} for a bad payload; 401 for a
    wrong token or unknown node.

Delivery: a bounded backlog (default 240 reports, 1 h at 15 s) of reports not yet delivered;
connection errors, timeouts, 408, 429 and 5xx are retried with exponential backoff and jitter
(1 s doubling to 60 s, honouring Retry-After); other answers (400, 401, 403, 404, 3xx, …) are
final for that report: it is dropped and the platform's `detail` logged (401/403 loudly), except
that a refused token is first handed to `on_refused` (the agent's credentials, which register
the node again with the bootstrap token): the batch is sent again with the new token, or kept
and retried with backoff until the operator acts. When the backlog is full the oldest report is
dropped and counted.
"""

import contextlib
import http.client
import json
import logging
import math
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

from nodeagent import AGENT_VERSION
from nodeagent.metrics import METRIC_NAMES
from nodeagent.source import (
    DriverInfo,
    Event,
    GpuInfo,
    GpuMetrics,
    LostGpu,
    Snapshot,
    iso_utc,
    utc_now,
)

log = logging.getLogger(__name__)

REPORT_PATH = "/api/v1/nodes/{node}/report"
MAX_SAMPLES = 60  # samples merged into one POST (the platform takes up to 240)
MAX_EVENTS = 1000  # events in one POST (the platform's limit)
DEFAULT_BUFFER = 240
DEFAULT_TIMEOUT = 10.0
RETRY_STATUSES = frozenset({408, 429})
AUTH_STATUSES = frozenset({401, 403})


@dataclass
class PendingReport:
    """One sampling cycle's report, not yet delivered (`sent_at` is set when it is sent)."""

    driver: DriverInfo
    inventory: list[GpuInfo]
    samples: list[dict[str, Any]]
    events: list[Event] = field(default_factory=list)
    lost_gpus: list[LostGpu] = field(default_factory=list)


def pending_report(
    driver: DriverInfo, inventory: list[GpuInfo], snapshot: Snapshot, events: list[Event]
) -> PendingReport:
    return PendingReport(
        driver=driver,
        inventory=inventory,
        samples=[{"at": snapshot["at"], "gpus": snapshot["gpus"]}],
        events=events,
        lost_gpus=snapshot["lost"],
    )


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


def _gpu(gpu: GpuMetrics) -> dict[str, Any]:
    metrics = gpu["metrics"]
    return {
        "index": gpu["index"],
        "uuid": gpu["uuid"],
        "metrics": {name: _number(metrics.get(name)) for name in METRIC_NAMES},
    }


def build_report(
    node: str, batch: list[PendingReport], *, dropped_reports: int, sent_at: str
) -> dict[str, Any]:
    """The contract body for one or more pending reports (oldest first), merged."""
    if not batch:
        raise ValueError("nothing to report")
    newest = batch[-1]
    return {
        "agent_version": AGENT_VERSION,
        "node": node,
        "sent_at": sent_at,
        "driver": dict(newest.driver),
        "inventory": [dict(gpu) for gpu in newest.inventory],
        "samples": [
            {"at": sample["at"], "gpus": [_gpu(gpu) for gpu in sample["gpus"]]}
            for report in batch
            for sample in report.samples
        ],
        "events": [dict(event) for report in batch for event in report.events],
        "lost_gpus": [dict(gpu) for gpu in newest.lost_gpus],
        "dropped_reports": dropped_reports,
    }


def report_url(platform_url: str, node: str) -> str:
    parsed = urllib.parse.urlsplit(platform_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"the platform URL must be http(s)://host[:port]: {platform_url!r}")
    return platform_url.rstrip("/") + REPORT_PATH.format(node=urllib.parse.quote(node, safe=""))


def default_jitter(delay: float) -> float:
    """Between half the delay and the delay ("equal jitter")."""
    return delay * random.uniform(0.5, 1.0)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: it would turn the POST into a GET, or carry the token away."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Answer:
    status: int | None  # None: no HTTP answer (connection refused, timeout, …)
    detail: str = ""
    retry_after: float | None = None


class Reporter:
    """Delivers pending reports, oldest first, with a bounded backlog and backoff.

    Single-threaded: the agent loop calls `submit()` each cycle and `flush()` whenever
    `due()`; nothing here sleeps. `clock` (monotonic seconds) and `jitter` are injectable.
    `token` is the node token, or a callable returning it (re-read at each POST, so a rotated
    token file is picked up). `on_refused(status, detail)`, when given, is told of a 401/403
    and answers whether a new token is in place.
    """

    def __init__(
        self,
        platform_url: str,
        node: str,
        token: str | Callable[[], str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        buffer_size: int = DEFAULT_BUFFER,
        max_samples: int = MAX_SAMPLES,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        jitter: Callable[[float], float] = default_jitter,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], str] = lambda: iso_utc(utc_now()),
        on_refused: Callable[[int, str], bool] | None = None,
    ) -> None:
        if buffer_size < 1:
            raise ValueError("buffer_size must be at least 1")
        self.url = report_url(platform_url, node)
        self.node = node
        self._token = token
        self.timeout = timeout
        self.buffer: deque[PendingReport] = deque()
        self.buffer_size = buffer_size
        self.max_samples = max(1, max_samples)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._jitter = jitter
        self._clock = clock
        self._now = now
        self._on_refused = on_refused
        self._opener = urllib.request.build_opener(_NoRedirect())
        self.dropped_reports = 0  # backlog overflow, since start
        self.rejected_reports = 0  # final answers other than 2xx
        self.delivered_reports = 0
        self.failures = 0  # consecutive retryable failures
        self.next_attempt = 0.0  # clock() time before which flush() does not send
        self.last_delay: float | None = None

    # -- backlog ------------------------------------------------------------------------------

    def submit(self, report: PendingReport) -> None:
        if len(self.buffer) >= self.buffer_size:
            self.buffer.popleft()
            self.dropped_reports += 1
            log.warning(
                "report backlog full (%d): dropped the oldest report (%d dropped so far)",
                self.buffer_size,
                self.dropped_reports,
            )
        self.buffer.append(report)

    @property
    def pending(self) -> int:
        return len(self.buffer)

    def due(self) -> bool:
        return bool(self.buffer) and self._clock() >= self.next_attempt

    def _batch(self, limit: int) -> list[PendingReport]:
        batch: list[PendingReport] = []
        samples = events = 0
        for report in self.buffer:
            if len(batch) >= limit:
                break
            more_samples, more_events = len(report.samples), len(report.events)
            if batch and (
                samples + more_samples > self.max_samples or events + more_events > MAX_EVENTS
            ):
                break
            batch.append(report)
            samples += more_samples
            events += more_events
        return batch

    # -- delivery -----------------------------------------------------------------------------

    def flush(self) -> int:
        """Send the backlog, oldest first, until it is empty or a retryable failure; returns
        the number of reports delivered. Does nothing before `next_attempt`."""
        delivered = 0
        limit = len(self.buffer)
        asked = False  # on_refused is asked once a flush
        while self.buffer and self._clock() >= self.next_attempt:
            batch = self._batch(limit)
            answer = self._post(batch)
            if answer.status is not None and 200 <= answer.status < 300:
                for _ in batch:
                    self.buffer.popleft()
                delivered += len(batch)
                self.delivered_reports += len(batch)
                self._reset_backoff()
                continue
            if answer.status is None or answer.status in RETRY_STATUSES or answer.status >= 500:
                self._schedule_retry(answer)
                break
            if answer.status in AUTH_STATUSES and self._on_refused is not None:
                if not asked:
                    asked = True
                    if self._on_refused(answer.status, answer.detail):
                        continue  # a new token: the same batch again
                self._schedule_retry(answer)  # kept until the node has a token that works
                break
            if len(batch) > 1:
                limit = 1  # find the report the platform refuses; deliver the others
                continue
            self.buffer.popleft()
            self.rejected_reports += 1
            self._reset_backoff()
            self._log_refusal(answer)
        return delivered

    def _reset_backoff(self) -> None:
        self.failures = 0
        self.next_attempt = 0.0
        self.last_delay = None

    def _schedule_retry(self, answer: Answer) -> None:
        self.failures += 1
        delay = min(self.backoff_max, self.backoff_initial * 2 ** (self.failures - 1))
        delay = self._jitter(delay)
        if answer.retry_after is not None:
            delay = max(delay, min(answer.retry_after, self.backoff_max))
        self.last_delay = delay
        self.next_attempt = self._clock() + delay
        what = f"HTTP {answer.status}" if answer.status is not None else answer.detail
        log.warning(
            "platform unreachable (%s); %d report(s) waiting, retrying in %.1f s",
            what,
            len(self.buffer),
            delay,
        )

    def _log_refusal(self, answer: Answer) -> None:
        if answer.status in AUTH_STATUSES:
            log.error(
                "THE PLATFORM REFUSED THIS NODE'S TOKEN (HTTP %s: %s): check the node token "
                "(--token-file/--token) and that node %r is registered; report dropped",
                answer.status,
                answer.detail or "no detail",
                self.node,
            )
        else:
            log.warning(
                "the platform refused a report (HTTP %s: %s); dropped",
                answer.status,
                answer.detail or "no detail",
            )

    def _post(self, batch: list[PendingReport]) -> Answer:
        try:
            token = self._token() if callable(self._token) else self._token
        except OSError as exc:
            return Answer(None, f"cannot read the node token: {exc}")
        body = build_report(
            self.node, batch, dropped_reports=self.dropped_reports, sent_at=self._now()
        )
        request = urllib.request.Request(  # noqa: S310 - the URL's scheme is checked: http(s)
            self.url,
            data=json.dumps(body, separators=(",", ":")).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": f"starverse-nodeagent/{AGENT_VERSION}",
            },
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                response.read(65536)
                return Answer(response.status)
        except urllib.error.HTTPError as exc:
            payload = _read_quietly(exc)
            with contextlib.suppress(Exception):
                exc.close()
            return Answer(exc.code, _detail(payload), _retry_after(exc.headers))
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return Answer(None, f"{type(exc).__name__}: {reason}")


def _read_quietly(response: urllib.error.HTTPError) -> bytes:
    try:
        body: bytes = response.read(65536)
    except (OSError, http.client.HTTPException):
        return b""
    return body


def _detail(payload: bytes) -> str:
    try:
        data = json.loads(payload)
    except ValueError:
        return payload.decode("utf-8", "replace")[:300].strip()
    if isinstance(data, dict) and "detail" in data:
        code = data.get("code")
        return f"{data['detail']}" + (f" [{code}]" if code else "")
    return json.dumps(data)[:300]


def _retry_after(headers: Message | None) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None
