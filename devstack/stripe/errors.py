"""Errors in Stripe's shape: ``{"error": {"type", "message", "param"?, "code"?}}``."""

from typing import Any


class StripeFakeError(Exception):
    """An error the fake answers with; in-process helpers raise it too."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.param is not None:
            error["param"] = self.param
        if self.code is not None:
            error["code"] = self.code
        return {"error": error}


def invalid_request(
    message: str, *, param: str | None = None, code: str | None = None
) -> StripeFakeError:
    return StripeFakeError(400, message, param=param, code=code)


def missing(kind: str, object_id: str, param: str = "id") -> StripeFakeError:
    return StripeFakeError(
        404, f"No such {kind}: '{object_id}'", param=param, code="resource_missing"
    )


def unexpected_state(message: str, code: str = "unexpected_state") -> StripeFakeError:
    return StripeFakeError(400, message, code=code)


def fault(status: int) -> StripeFakeError:
    """The error body an injected fault answers with."""
    if status == 429:
        return StripeFakeError(
            429,
            "Request rate limit exceeded (injected by the local Stripe fake).",
            code="rate_limit",
        )
    if status == 409:
        return StripeFakeError(
            409,
            "This object cannot be accessed right now because another API request or Stripe "
            "process is currently accessing it (injected by the local Stripe fake).",
            code="lock_timeout",
        )
    if status >= 500:
        return StripeFakeError(
            status,
            "An unknown error occurred (injected by the local Stripe fake).",
            type="api_error",
        )
    return StripeFakeError(status, f"Injected fault {status} (local Stripe fake).")
