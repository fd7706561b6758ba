"""Every API error is `{"detail": "...", "code": "..."}`; validation errors add `errors`
(field → messages) and fold them into one readable detail."""

from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from django.utils.translation import gettext as _
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from starverse.core.errors import ServiceError
from starverse.core.middleware import too_large_detail


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


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        body: dict[str, Any] = {"detail": exc.message, "code": exc.code}
        if exc.field:
            body["errors"] = {exc.field: [exc.message]}
        refusal = Response(body, status=exc.status_code)
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
