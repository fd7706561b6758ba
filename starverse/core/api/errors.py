"""Every API error is `{"detail": "...", "code": "..."}`; validation errors add `errors`
(field → messages) and fold them into one readable detail. That holds for the answers Django
gives rather than a view, too: a path under /api/ that no route matches is a JSON 404 (the last
route, api_not_found), and an error the views did not handle is a JSON 500 (handler500)."""

from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from starverse.core.errors import ServiceError
from starverse.core.middleware import API_PREFIX, too_large_detail


def _flatten(errors: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(errors, dict):
        out: list[tuple[str, str]] = []
        for key, value in errors.items():
            name = key if key != "non_field_errors" else ""
            out += _flatten(value, f"{prefix}.{name}" if prefix and name else (name or prefix))
        return out
    if isinstance(errors, list):
        out = []
        for index, value in enumerate(errors):
            nested = isinstance(value, dict | list)
            out += _flatten(value, f"{prefix}[{index}]" if nested else prefix)
        return out
    return [(prefix, str(errors))]


def service_error_body(exc: ServiceError) -> dict[str, Any]:
    """The body of a service's refusal (a dry run answers the same body: api.dryrun)."""
    body: dict[str, Any] = {"detail": exc.message, "code": exc.code}
    if exc.field:
        body["errors"] = {exc.field: [exc.message]}
    return body


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        refusal = Response(service_error_body(exc), status=exc.status_code)
        if exc.status_code == status.HTTP_401_UNAUTHORIZED:
            refusal["WWW-Authenticate"] = 'Bearer realm="api"'
        return refusal
    if isinstance(exc, RequestDataTooBig):  # a body without Content-Length, read past the limit
        return Response(
            {"detail": too_large_detail(), "code": "too_large"},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        pairs = _flatten(exc.detail)
        detail = "; ".join(f"{field}: {message}" if field else message for field, message in pairs)
        response.data = {
            "detail": detail or _("Invalid input."),
            "code": "invalid",
            "errors": {field or "non_field_errors": [] for field, _m in pairs},
        }
        for field, message in pairs:
            response.data["errors"][field or "non_field_errors"].append(message)
        return response
    detail = getattr(exc, "detail", str(exc))
    code = detail.code if hasattr(detail, "code") else getattr(exc, "default_code", "error")
    if isinstance(exc, exceptions.Throttled):
        code = "throttled"
    response.data = {"detail": str(detail), "code": code}
    if response.status_code == status.HTTP_401_UNAUTHORIZED:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def _error(status_code: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail, "code": code}, status=status_code)


@csrf_exempt  # a POST to no route is a 404 whatever its cookies, as the API's routes are
def api_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Routed last, and Django's handler404: under /api/ an address that no route matches (an
    id of the wrong form, a path of no route) is the API's JSON 404, also with DEBUG on;
    elsewhere the console's page (templates/404.html)."""
    if not _is_api(request):
        return defaults.page_not_found(request, exception or Http404())
    detail = _("Not found: no API route has this address (the routes are listed at /api/docs/).")
    return _error(status.HTTP_404_NOT_FOUND, "not_found", detail)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's handler500: an error no view handled is a JSON 500 under /api/, naming the
    request id (X-Request-ID) that its log lines carry; elsewhere the console's page
    (templates/500.html)."""
    if not _is_api(request):
        return defaults.server_error(request)
    detail = _(
        "Server error: the request failed on our side. If it happens again, give support the "
        "request id %(request_id)s."
    ) % {"request_id": getattr(request, "request_id", "-")}
    return _error(status.HTTP_500_INTERNAL_SERVER_ERROR, "server_error", detail)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's handler400 (a SuspiciousOperation outside a view, such as an unknown Host)."""
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    return _error(status.HTTP_400_BAD_REQUEST, "invalid", _("Malformed request."))
