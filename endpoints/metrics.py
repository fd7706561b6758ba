"""An endpoint's request statistics: requests/s, latency p50/p99, tokens/s and replicas Ready,
per interval. In development the gateway in front of the endpoints (devstack/gateway, playing
the KEDA interceptor) counts them and the sync task collects them from ENDPOINT_STATS_URL; in
production the engines' own Prometheus metrics are scraped instead (docs/user-guide.md, Inference
endpoints)."""

import json
import logging
import math
import urllib.request
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models.functions import Lower
from django.utils import timezone

from endpoints.gateway import host_parse
from endpoints.models import Endpoint, EndpointSample

logger = logging.getLogger(__name__)
STATS_TIMEOUT_S = 2.0


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)], 1)


def samples_record(stats: dict[str, Any], *, seconds: float, now: datetime | None = None) -> int:
    """One sample per endpoint host in `stats` ({host: {requests, tokens, latencies_ms}}, what
    the gateway counted since it was last read). Returns how many were written."""
    now = now or timezone.now()
    # the gateway counts by host name, as the autoscaler matches hosts (no port)
    port = settings.GATEWAY_DOMAIN.partition(":")[2]
    ids = {
        host: host_parse(f"{host}:{port}" if port and ":" not in host else host) for host in stats
    }
    found = dict(
        Endpoint.objects.annotate(lower_id=Lower("id"))
        .filter(lower_id__in=[i for i in ids.values() if i])
        .values_list("lower_id", "pk")
    )
    ready = dict(Endpoint.objects.filter(pk__in=found.values()).values_list("pk", "replicas_ready"))
    rows = []
    for host, counts in stats.items():
        endpoint_id = found.get(ids[host] or "")
        if endpoint_id is None or not isinstance(counts, dict):
            continue
        latencies = [float(v) for v in counts.get("latencies_ms") or []]
        rows.append(
            EndpointSample(
                endpoint_id=endpoint_id,
                at=now,
                seconds=seconds,
                requests=int(counts.get("requests") or 0),
                tokens=int(counts.get("tokens") or 0),
                latency_p50_ms=_percentile(latencies, 0.5),
                latency_p99_ms=_percentile(latencies, 0.99),
                replicas_ready=ready.get(endpoint_id, 0),
            )
        )
    EndpointSample.objects.bulk_create(rows)
    return len(rows)


_last_read: list[float] = []


def samples_collect(url: str) -> int:
    """Read (and so reset) the development gateway's counts and record them."""
    now = timezone.now()
    try:
        with urllib.request.urlopen(url, timeout=STATS_TIMEOUT_S) as answer:  # noqa: S310
            stats = json.loads(answer.read())
    except (OSError, ValueError) as error:
        logger.warning("endpoints.stats_unreadable url=%s error=%s", url, error)
        return 0
    seconds = now.timestamp() - _last_read[0] if _last_read else 1.0
    _last_read[:] = [now.timestamp()]
    return samples_record(
        stats if isinstance(stats, dict) else {}, seconds=max(seconds, 0.001), now=now
    )


def endpoint_metrics(endpoint: Endpoint, *, since: datetime | None = None) -> list[dict[str, Any]]:
    """The series of `GET /endpoints/{id}/metrics`, oldest first."""
    since = since or timezone.now() - timedelta(hours=1)
    return [
        {
            "ts": s.at,
            "requests_per_s": round(s.requests / s.seconds, 3),
            "latency_p50_ms": s.latency_p50_ms,
            "latency_p99_ms": s.latency_p99_ms,
            "tokens_per_s": round(s.tokens / s.seconds, 3),
            "replicas_ready": s.replicas_ready,
        }
        for s in EndpointSample.objects.filter(endpoint=endpoint, at__gte=since).order_by("at")
    ]
