"""Who sent a request: the client's address, read one way by everything that records it or
decides by it (the audit log, sign-up records, throttles and log-in lockouts, /metrics'
METRICS_ALLOWED_CIDRS, the access log).

Behind reverse proxies REMOTE_ADDR is the nearest proxy's. Each proxy appends the address it
was reached from to X-Forwarded-For, so with NUM_PROXIES of ours in front (the chart's ingress
is one) the client is the NUM_PROXIES-th entry from the right; entries further left are
whatever the client sent and prove nothing. With NUM_PROXIES=0 the header is not read at all.
The rule is DRF's (its throttles' get_ident), kept here once for every caller. An entry that
is not an IP address (a request that reached the pod past the proxies with a header of its
own, a misconfigured proxy) counts as absent: the nearest address, REMOTE_ADDR, is used."""

import ipaddress
from collections.abc import Mapping
from typing import Any

from django.conf import settings


def _address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        return None


def client_ip_of(meta: Mapping[str, Any]) -> str | None:
    """The client's address from a WSGI environ or a request's META; None when not even
    REMOTE_ADDR is an address."""
    remote = str(meta.get("REMOTE_ADDR") or "")
    proxies = int(settings.NUM_PROXIES)
    forwarded = str(meta.get("HTTP_X_FORWARDED_FOR") or "")
    if proxies > 0 and forwarded:
        entries = forwarded.split(",")
        found = _address(entries[-min(proxies, len(entries))])
        if found is not None:
            return found
    return _address(remote)


def client_ip(request: Any) -> str | None:
    """client_ip_of a Django or DRF request."""
    return client_ip_of(request.META)
