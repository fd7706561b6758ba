"""Refuses, before any view runs, requests that no view may answer: one addressed to the
gateway's domain anywhere but the proxy's check, a body over the documented limit, and NUL
bytes in the path, the query string, a header or a posted form (PostgreSQL refuses NUL in text,
so they would otherwise surface as a 500). API requests get the usual `{"detail", "code"}`;
console pages a plain 400 or 413."""

import re
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _

from starverse.core.links import public_url
from starverse.core.sites import under_domain

API_PREFIX = "/api/"
# The proxy's authorization check (Envoy appends the original path to it).
GATEWAY_CHECK = re.compile(r"^/gateway/auth(/|$)")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def max_body_bytes() -> int:
    """The largest request body the API reads: Django's own limit on an in-memory body."""
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0)


def too_large_detail() -> str:
    return _("The request body is larger than %(limit)d bytes.") % {"limit": max_body_bytes()}


def _declared_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _has_nul(request: HttpRequest) -> bool:
    if "\x00" in request.path:
        return True
    if any("\x00" in k or any("\x00" in v for v in vs) for k, vs in request.GET.lists()):
        return True
    return any(
        "\x00" in str(value) for key, value in request.META.items() if key.startswith("HTTP_")
    )


class BadInputMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path_info.startswith(API_PREFIX)
        limit = max_body_bytes()
        if api and limit and _declared_length(request) > limit:
            return self.refuse(api, 413, "too_large", too_large_detail())
        try:
            nul = _has_nul(request) or (not api and self._form_has_nul(request))
        except RequestDataTooBig:
            return self.refuse(api, 413, "too_large", too_large_detail())
        except SuspiciousOperation:  # too many fields, a malformed multipart body
            return self.refuse(api, 400, "invalid", _("Malformed request."))
        if nul:
            return self.refuse(api, 400, "invalid", _("The request contains a NUL byte."))
        return self.get_response(request)

    @staticmethod
    def _form_has_nul(request: HttpRequest) -> bool:
        if request.method != "POST" or not (request.content_type or "").startswith(FORM_TYPES):
            return False
        return any("\x00" in k or any("\x00" in v for v in vs) for k, vs in request.POST.lists())

    @staticmethod
    def refuse(api: bool, status: int, code: str, detail: str) -> HttpResponse:
        if api:
            return JsonResponse({"detail": detail, "code": code}, status=status)
        return HttpResponse(detail, status=status, content_type="text/plain; charset=utf-8")


class GatewayHostMiddleware:
    """A request whose Host is the gateway's domain (an instance's or an endpoint's address) is
    answered only at /gateway/auth: ALLOWED_HOSTS names `.GATEWAY_DOMAIN` because the proxy asks
    its check with the original Host, and for nothing else. Any other page of the console there
    (the log-in, a password reset, the API) would be served at an address whose other pages are
    tenants' content, and could name that Host in what it builds. Placed before the
    probes: a scrape or a probe never comes with a gateway Host either."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # The Host header itself, as Django reads it (the platform never sets
        # USE_X_FORWARDED_HOST, so X-Forwarded-Host names no host of this request).
        host = str(request.META.get("HTTP_HOST") or request.META.get("SERVER_NAME") or "")
        if under_domain(host, settings.GATEWAY_DOMAIN) and not GATEWAY_CHECK.match(
            request.path_info
        ):
            detail = _(
                "This address serves an instance, not the console: open the console at %(url)s."
            ) % {"url": public_url()}
            api = request.path_info.startswith(API_PREFIX)
            return BadInputMiddleware.refuse(api, 400, "wrong_host", detail)
        return self.get_response(request)
