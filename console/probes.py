"""The endpoints that machines call: `/healthz` (the process answers: liveness), `/readyz` (its
dependencies answer: readiness) and `/metrics` (Prometheus).

They are answered by a middleware near the top of the chain, before the HTTPS redirect, the
Host check (ALLOWED_HOSTS), sessions, authentication and throttles: a kubelet probes over plain
HTTP with the pod's IP as Host, and a probe must not depend on the session store or count
against anyone's throttle. Nothing in these answers is built from the Host header, so accepting
any Host here gives a forged one nothing to poison. /metrics keeps its own guard
(starverse.core.metrics.scrape_allowed)."""

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from console.metrics import PlatformCollector
from starverse.celery import app as celery_app
from starverse.core import kube
from starverse.core.metrics import registry, scrape_allowed

logger = logging.getLogger(__name__)

OK = "ok"


def check_database() -> None:
    """One round trip, bounded by a statement timeout local to its transaction (connecting is
    bounded by the connect_timeout the settings give)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = %s", [int(settings.READYZ_TIMEOUT_S * 1000)])
        cursor.execute("SELECT 1")


def check_broker() -> None:
    """The Celery broker (Redis in production) accepts a connection."""
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=max(1, round(settings.READYZ_TIMEOUT_S)))


def check_cluster() -> None:
    kube.api_reachable(settings.READYZ_TIMEOUT_S)


def readiness_checks() -> dict[str, Callable[[], None]]:
    """What this process needs to serve: always the database and the broker; the cluster's API
    only in a process that talks to it (KUBE_ACCESS true: the worker). The web tier and beat
    run with KUBE_ACCESS=false and must not be made unready by the cluster they never call."""
    checks: dict[str, Callable[[], None]] = {"database": check_database, "broker": check_broker}
    if settings.KUBE_ACCESS is True and settings.KUBECONFIG:
        checks["cluster"] = check_cluster
    return checks


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process is up and serving; no dependency is asked, so a database outage
    does not make the kubelet restart every web pod."""
    return JsonResponse({"status": OK})


def readyz(request: HttpRequest) -> JsonResponse:
    results: dict[str, str] = {}
    for name, check in readiness_checks().items():
        try:
            check()
        except Exception as error:  # a probe reports whatever went wrong
            # The error's type only: a broker URL or DSN in a message could carry a password.
            results[name] = f"failed: {type(error).__name__}"
            logger.warning("readyz.failed check=%s error=%s", name, type(error).__name__)
        else:
            results[name] = OK
    failed = [name for name, result in results.items() if result != OK]
    body = {"status": "unavailable" if failed else OK, "checks": results, "failed": failed}
    return JsonResponse(body, status=503 if failed else 200)


def metrics(request: HttpRequest) -> HttpResponse:
    if not scrape_allowed(request):
        return HttpResponse(status=403, content_type="text/plain; charset=utf-8")
    body = generate_latest(registry(PlatformCollector()))
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


ROUTES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics,
}


class ProbeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = ROUTES.get(request.path_info)
        if view is None or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        response = view(request)
        response["Cache-Control"] = "no-store"
        return response
