"""Errors that services raise for a user to act on. The API maps them to status codes; the
console shows their message. Each has a stable machine-readable code."""


class ServiceError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, code: str | None = None, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        # The request field at fault (dotted for nested ones, e.g. engine_options.dtype): the
        # API answer names it under `errors`, like a serializer's validation error.
        self.field = field
        if code:
            self.code = code


class InvalidInput(ServiceError):
    status_code = 400
    code = "invalid"


class FieldInvalid(InvalidInput):
    """Invalid input that belongs to one field of the request: the API answers it under
    `errors.<field>` as well as in `detail`."""

    def __init__(self, field: str, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.field = field


class InsufficientBalance(ServiceError):
    status_code = 402
    code = "insufficient_balance"


class Forbidden(ServiceError):
    status_code = 403
    code = "forbidden"


class NotFound(ServiceError):
    status_code = 404
    code = "not_found"


class Conflict(ServiceError):
    status_code = 409
    code = "conflict"


class IdempotencyConflict(Conflict):
    code = "idempotency_conflict"


class Unauthenticated(ServiceError):
    status_code = 401
    code = "authentication_failed"


class TooManyAttempts(ServiceError):
    """Too many failed log-ins for the account or from the address (starverse.accounts.lockout):
    refused without checking anything, until the window ends."""

    status_code = 429
    code = "locked_out"


class TooManyRequests(ServiceError):
    """Over a per-account limit on how many of something may exist at once (queued orders):
    wait for one to finish, or have the limit raised."""

    status_code = 429
    code = "too_many_requests"


class ServiceUnavailable(ServiceError):
    status_code = 503
    code = "unavailable"
