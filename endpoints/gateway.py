"""Who may call an endpoint: the gateway's authorization check for endpoint hosts
(`ep-<id>.<GATEWAY_DOMAIN>`), asked before every request like the instances' check
(instances.gateway), which answers every other host. A request passes with
`Authorization: Bearer <key>` of a live key of that endpoint; anything else is a 401 in
OpenAI's error shape and never reaches a GPU. Valid keys are kept for KEY_CACHE_S, so a burst
costs one database read, and a revoked key stops passing within those seconds."""

import json
import re

from django.conf import settings
from django.core.cache import cache
from django.db.models.functions import Lower
from django.utils.translation import gettext as _

from endpoints.choices import ENDED, EndpointStatus
from endpoints.models import EndpointKey
from endpoints.services import key_cache_name, key_digest
from instances.gateway import Verdict

KEY_CACHE_S = 2
_LABEL = re.compile(r"^ep-([a-z0-9]{20})$")


def host_parse(host: str) -> str | None:
    """The lower-cased endpoint id of an endpoint host, or None for any other host."""
    host = host.strip().lower().rstrip(".")
    domain = settings.GATEWAY_DOMAIN
    default_port = ":443" if settings.GATEWAY_SCHEME == "https" else ":80"
    if ":" not in domain and host.endswith(default_port):
        host = host.removesuffix(default_port)
    label, dot, rest = host.partition(".")
    found = _LABEL.match(label) if dot and rest == domain else None
    return f"ep_{found.group(1)}" if found else None


def _error(status: int, message: str, kind: str, code: str) -> Verdict:
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    headers = {"Content-Type": "application/json"}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="endpoint"'
    return Verdict(status, headers, body)


def _refused() -> Verdict:
    return _error(
        401,
        _("Incorrect or missing API key: pass one of this endpoint's keys as a Bearer token."),
        "invalid_request_error",
        "invalid_api_key",
    )


def endpoint_check(*, host: str, authorization: str) -> Verdict | None:
    """The check's answer for an endpoint host, or None when the host is not one."""
    lower_id = host_parse(host)
    if lower_id is None:
        return None
    scheme, _sp, key = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return _refused()
    digest = key_digest(key.strip())
    cached = cache.get(key_cache_name(digest))
    if cached is None:
        found = (
            EndpointKey.objects.filter(key_hash=digest, revoked_at__isnull=True)
            .exclude(endpoint__status__in=ENDED)
            .annotate(lower_id=Lower("endpoint_id"))
            .values_list("lower_id", "endpoint__status")
            .first()
        )
        if found is None:
            return _refused()
        cached = list(found)
        cache.set(key_cache_name(digest), cached, KEY_CACHE_S)
    if cached[0] != lower_id:
        return _refused()
    if cached[1] == EndpointStatus.FAILED:
        return _error(
            503,
            _("This endpoint failed; see its page in the console."),
            "server_error",
            "endpoint_failed",
        )
    # The gateway passes nothing of the caller's key on to the engine.
    return Verdict(200, {"X-Starverse-Endpoint": lower_id})
