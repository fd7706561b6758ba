"""apiserver-shaped errors for the Kubernetes API emulator (a development stand-in).

Every failure leaves the emulator as a ``Status`` object shaped like the real apiserver's,
so ``kubernetes.client.exceptions.ApiException`` carries the same ``.status`` and ``.body``
that it would against a real cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One field-level validation failure (``details.causes[]`` of an Invalid status)."""

    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueForbidden, ...
    field: str  # spec.containers[0].image
    detail: str = ""
    value: Any = None
    has_value: bool = False

    @property
    def message(self) -> str:
        label = {
            "FieldValueRequired": "Required value",
            "FieldValueInvalid": "Invalid value",
            "FieldValueForbidden": "Forbidden",
            "FieldValueNotSupported": "Unsupported value",
            "FieldValueDuplicate": "Duplicate value",
            "FieldValueTypeInvalid": "Invalid value",
            "FieldValueNotFound": "Not found",
            "FieldValueTooLong": "Too long",
        }.get(self.reason, "Invalid value")
        text = label
        if self.has_value:
            text += f": {json.dumps(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def render(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def cause(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, detail)


def invalid_value(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, detail, value, True)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, detail)


class ApiError(Exception):
    """An error answered as a ``Status`` object with the given HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(name: str, resource: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(resource, group)} "{name}" not found',
        _details(name, resource, group),
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        _details(name, resource, group),
    )


def conflict(resource: str, group: str, name: str, why: str = "") -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        _details(name, resource, group),
    )


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    rendered = [e.render() for e in errors]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [e.cause() for e in errors]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden_error(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'{qualified(resource, group)} "{name}" is forbidden: {why}',
        _details(name, resource, group),
    )


def method_not_allowed(verb: str, resource: str) -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        f"the server does not allow this method on the requested resource ({verb} {resource})",
        {},
    )


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"application/json, application/json-patch+json, application/merge-patch+json, "
        f"application/strategic-merge-patch+json, application/apply-patch+yaml "
        f"(got {content_type!r})",
        {},
    )


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})", {})


def too_many_requests(retry_after_s: int) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later. (injected by the kube emulator)",
        {"retryAfterSeconds": retry_after_s},
        {"Retry-After": str(retry_after_s)},
    )


def internal_error(message: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


def injected(status: int, retry_after_s: int) -> ApiError:
    """The error an ``inject_api_fault`` call asked for."""
    if status == 429:
        return too_many_requests(retry_after_s)
    if status == 500:
        return internal_error("injected fault (kube emulator)")
    if status == 503:
        return ApiError(503, "ServiceUnavailable", "injected fault (kube emulator)", {})
    if status == 410:
        return ApiError(410, "Gone", "injected fault (kube emulator)", {})
    if status == 409:
        return ApiError(409, "Conflict", "injected fault (kube emulator)", {})
    if status == 504:
        return ApiError(504, "Timeout", "injected fault (kube emulator)", {})
    return ApiError(status, "InternalError", "injected fault (kube emulator)", {})
