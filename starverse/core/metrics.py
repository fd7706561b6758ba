"""The platform's in-process Prometheus metrics, and how /metrics is exposed and guarded.

Two kinds of numbers, chosen by where the truth lives:
- what the database knows (orders, the queue, the fleet, the ledger, webhooks, node reports) is
  computed at scrape time by a collector of a few aggregate queries (console.metrics), so every
  web replica answers the same, nothing is lost on a restart, and no write path has to
  remember to count;
- what only a process sees (a task retried or failed, the last ledger audit's findings) is
  counted here, in prometheus_client's multiprocess mode when PROMETHEUS_MULTIPROC_DIR is set
  (gunicorn workers and Celery's prefork children each write their own file, and the process
  serving the scrape adds them up). The worker serves its own numbers on METRICS_PORT.

/metrics answers a scraper with the bearer token METRICS_TOKEN or from an address in
METRICS_ALLOWED_CIDRS; with neither set it is open only with DEBUG on (`make run`)."""

import hmac
import ipaddress
import logging
import os
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from prometheus_client import CollectorRegistry, Counter, Gauge, multiprocess, start_http_server
from prometheus_client.registry import REGISTRY, Collector

from starverse.core.addresses import client_ip

logger = logging.getLogger(__name__)

TASK_RETRIES = Counter(
    "starverse_task_retries",
    "Celery task retries, by task and cause: the error's class, or `wait` for a task that "
    "polls by retrying (provisioning waits for its pod this way).",
    ["task", "cause"],
)
TASK_FAILURES = Counter(
    "starverse_task_failures", "Celery tasks that ended in an exception, by task.", ["task"]
)
AUDIT_DRIFTING_WALLETS = Gauge(
    "starverse_ledger_audit_drifting_wallets",
    "Wallets whose cached balance differed from their ledger at the last audit.",
    multiprocess_mode="mostrecent",
)
AUDIT_UNBALANCED = Gauge(
    "starverse_ledger_audit_unbalanced_transactions",
    "Ledger transactions whose entries did not sum to zero at the last audit.",
    multiprocess_mode="mostrecent",
)
AUDIT_LAST_RUN = Gauge(
    "starverse_ledger_audit_last_run_timestamp_seconds",
    "When the last ledger audit finished (Unix time).",
    multiprocess_mode="mostrecent",
)


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def registry(*collectors: Collector) -> CollectorRegistry:
    """What one scrape reads: the in-process metrics (added up over the processes in
    multiprocess mode) and the given collectors."""
    if multiprocess_dir():
        scrape = CollectorRegistry(auto_describe=False)
        multiprocess.MultiProcessCollector(scrape)  # type: ignore[no-untyped-call]
    else:
        scrape = CollectorRegistry(auto_describe=False)
        scrape.register(_InProcess())
    for collector in collectors:
        scrape.register(collector)
    return scrape


class _InProcess(Collector):
    """The default registry's platform metrics (not the client's own process metrics, which
    describe one gunicorn worker of many)."""

    def collect(self) -> Any:
        for family in REGISTRY.collect():
            if family.name.startswith("starverse_"):
                yield family


def scrape_allowed(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    cidrs = settings.METRICS_ALLOWED_CIDRS
    if token:
        given = request.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return True
    if cidrs:
        try:
            address = ipaddress.ip_address(client_ip(request) or "")
        except ValueError:
            return False
        if any(address in ipaddress.ip_network(cidr) for cidr in cidrs):
            return True
    return not token and not cidrs and settings.DEBUG


# --- Celery hooks (connected in starverse.celery) ----------------------------------------------


def on_task_retry(request: Any = None, reason: Any = None, **_: Any) -> None:
    name = getattr(request, "task", None) or "unknown"
    error = getattr(reason, "exc", None)
    TASK_RETRIES.labels(task=name, cause=type(error).__name__ if error else "wait").inc()


def on_task_failure(sender: Any = None, **_: Any) -> None:
    TASK_FAILURES.labels(task=getattr(sender, "name", None) or "unknown").inc()


def serve_worker_metrics(port: int) -> None:
    """The worker's own endpoint (its retries, failures and audit findings), for a
    PodMonitor; it is not the web tier's /metrics and needs no token: only the cluster network
    reaches the worker's pod."""
    start_http_server(port, registry=registry())
    logger.info("metrics.worker port=%d", port)


def record_audit(drifting: int, unbalanced: int, finished_at: float) -> None:
    AUDIT_DRIFTING_WALLETS.set(drifting)
    AUDIT_UNBALANCED.set(unbalanced)
    AUDIT_LAST_RUN.set(finished_at)


def on_worker_ready(**_: Any) -> None:
    if settings.METRICS_PORT:
        serve_worker_metrics(settings.METRICS_PORT)
