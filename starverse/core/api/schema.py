"""The OpenAPI schema tells the truth: every 2xx body as it is sent, every error answer a route
can give, and an explicit operation id on every operation.

The error answers every route shares follow from how its view is configured, so they are added
here, once: 400, 406 and 413 on every route (a NUL byte in the query string or a header, an
Accept header that admits no media type of the route, a body over the limit: all refused before
any view code runs), 401 where the view reads credentials, 403 for staff-only views and for
unsafe methods under session authentication (CSRF), 404 on every path with a parameter (an id of
the wrong form matches no route) and on paginated lists (an unknown page), 415 where there is a
request body, 429 where the view is throttled. A route declares only what is special to it, with
`errors(...)` in its `extend_schema` responses."""

from typing import TYPE_CHECKING, Any

import uritemplate
from drf_spectacular.drainage import warn
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.authentication import SessionAuthentication
from rest_framework.pagination import BasePagination, PageNumberPagination
from rest_framework.permissions import IsAdminUser

from starverse.core.api.auth import person_keyed
from starverse.core.api.pagination import WholeList

# drf-spectacular is typed only in part: the helpers used here have no annotations. The type
# checker sees them through these signatures; at run time they are drf-spectacular's classes.
if TYPE_CHECKING:

    class _ResolvedComponent(ResolvedComponent):
        def __init__(
            self, name: str, type: str, schema: dict[str, Any] | None = None, object: Any = None
        ) -> None: ...

    class _SpectacularAutoSchema(SpectacularAutoSchema):
        def _get_paginator(self) -> BasePagination | None: ...
        def _get_response_for_code(
            self,
            serializer: Any,
            status_code: str,
            media_types: list[str] | None = None,
            direction: str = "response",
        ) -> dict[str, Any]: ...
        def _map_basic_serializer(self, serializer: Any, direction: Any) -> dict[str, Any]: ...

else:
    _ResolvedComponent = ResolvedComponent
    _SpectacularAutoSchema = SpectacularAutoSchema

ERROR = _ResolvedComponent(
    name="Error",
    type=ResolvedComponent.SCHEMA,
    object="Error",
    schema={
        "type": "object",
        "description": "Every error answer (starverse.core.api.errors).",
        "properties": {
            "detail": {"type": "string", "description": "What went wrong, for people."},
            "code": {"type": "string", "description": "Stable and machine-readable."},
            "errors": {
                "type": "object",
                "description": "Only on 400 for invalid fields: field → messages.",
                "additionalProperties": {"type": "array", "items": {"type": "string"}},
            },
        },
        "required": ["code", "detail"],
    },
)

ERROR_DESCRIPTIONS = {
    400: (
        "Invalid input; `errors` names each field that is wrong. Also a NUL byte in the path, "
        "the query string or a header (code `invalid`)."
    ),
    401: "No valid credentials.",
    402: "The balance does not cover it: top up first.",
    403: "Not allowed: staff only, or a session request without its CSRF token.",
    404: (
        "Not found (another tenant's object is not found either, and an id of the wrong form "
        "matches no route)."
    ),
    406: "The Accept header admits none of the media types this route answers.",
    409: "Not possible in the current state, or a conflicting repeat.",
    413: "The request body is over the limit (DATA_UPLOAD_MAX_MEMORY_SIZE; 2.5 MB by default).",
    415: "The request body is not JSON (send Content-Type: application/json).",
    429: "Too many requests: retry after the seconds in Retry-After.",
    503: "An outside service could not be reached; nothing was done.",
}

# The 403 of a route that acts on the person (starverse.core.api.auth.person_keyed).
PERSON_KEYED_NOTE = "A team's token is refused here: this acts on the person (`wrong_team`)."
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
# Integer columns' storage limits (16, 32 and 64 bits), which differ between database backends:
# the schema leaves them out so that it is the same whichever database generated it.
STORAGE_MAXIMA = {2**15 - 1, 2**31 - 1, 2**63 - 1}
STORAGE_MINIMA = {-(2**15), -(2**31), -(2**63)}


def errors(*codes: int, also: dict[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """Error answers special to one route, for its `extend_schema(responses=...)`; `also` adds
    to a code's description what that code means on this route (its own error codes)."""
    notes = also or {}
    return {
        code: OpenApiResponse(
            response=ERROR.ref,
            description=" ".join(filter(None, [ERROR_DESCRIPTIONS[code], notes.get(code)])),
        )
        for code in sorted({*codes, *notes})
    }


IDEMPOTENCY_KEY_MAX_LENGTH = 200
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    description="The same key answers the same order instead of a second one.",
)


def idempotency_key(request: Any) -> str:
    """An order's Idempotency-Key header (documented by IDEMPOTENCY_KEY), cut to what the
    orders' key column holds; empty when absent."""
    return str(request.headers.get("Idempotency-Key", ""))[:IDEMPOTENCY_KEY_MAX_LENGTH]


def on_hold_error() -> dict[int, OpenApiResponse]:
    """The 403 of a route that starts new spending, which an account on hold may not do."""
    description = (
        "The account is on hold after a disputed or refunded payment (code "
        "`account_on_hold`): no new orders until support lifts it. Also a session request "
        "without its CSRF token."
    )
    return {403: OpenApiResponse(response=ERROR.ref, description=description)}


class AutoSchema(_SpectacularAutoSchema):
    def get_operation_id(self) -> str:
        # Ids are the names generated clients call; derived ones change when a view changes.
        operation_id = super().get_operation_id()
        warn(
            f"{self.method} {self.path} has no explicit operation_id (derived: {operation_id}); "
            "give it one with extend_schema(operation_id=...)"
        )
        return operation_id

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        self.registry.register_on_missing(ERROR)
        notes = {403: PERSON_KEYED_NOTE} if person_keyed(self.view, self.method) else {}
        for code, response in errors(*sorted(self.implied_error_codes()), also=notes).items():
            responses.setdefault(str(code), self._get_response_for_code(response, str(code)))
        return dict(sorted(responses.items()))

    def implied_error_codes(self) -> set[int]:
        view = self.view
        authentication = list(getattr(view, "authentication_classes", []))
        # refused before the view's own code: BadInputMiddleware, DRF's content negotiation
        codes = {400, 406, 413}
        if authentication:  # a wrong or revoked token is refused on every route that reads one
            codes.add(401)
        if any(issubclass(p, IsAdminUser) for p in getattr(view, "permission_classes", [])):
            codes.add(403)
        if self.method in UNSAFE_METHODS and any(
            issubclass(a, SessionAuthentication) for a in authentication
        ):
            codes.add(403)
        if uritemplate.variables(self.path):  # an object's route, or a value of no route's form
            codes.add(404)
        if self._is_list_view() and isinstance(self._get_paginator(), PageNumberPagination):
            codes.add(404)  # ?page= past the end
        if self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None:
            codes.add(415)
        if getattr(view, "throttle_classes", None):
            codes.add(429)
        return codes

    def get_paginated_name(self, serializer_name: str) -> str:
        if isinstance(self._get_paginator(), WholeList):
            return f"{serializer_name}List"  # the envelope, but never more than one page
        return super().get_paginated_name(serializer_name)

    def _map_basic_serializer(self, serializer: Any, direction: Any) -> dict[str, Any]:
        schema = super()._map_basic_serializer(serializer, direction)
        for prop in schema.get("properties", {}).values():
            if prop.get("type") == "integer":
                _drop_storage_limits(prop)
            if direction == "response":
                # a model field's validators check forms, not the stored rows an answer shows
                prop.pop("pattern", None)
        if direction == "response" and schema.get("properties"):
            # An output serializer sends every field it has, always (null where it says so).
            schema["required"] = sorted(schema["properties"])
        return schema


def _drop_storage_limits(prop: dict[str, Any]) -> None:
    if prop.get("maximum") in STORAGE_MAXIMA:
        del prop["maximum"]
    if prop.get("minimum") in STORAGE_MINIMA:
        del prop["minimum"]
    if prop.get("format") == "int64":
        del prop["format"]  # only ever inferred from those limits
