"""`dry_run: true` on an order or a start (every product's): the same admission runs and the
answer is `200 {quote, refusal}` without anything created (compute.dryrun runs the order path
and rolls it back). Here: the field, the start routes' body, the answer and its schema."""

from typing import Any

from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from starverse.core.api.errors import service_error_body
from starverse.core.api.serializers import InputSerializer
from starverse.core.errors import ServiceError

DRY_RUN_HELP = gettext_lazy(
    "Only say what the order would cost and whether it would be taken (200 {quote, refusal}): "
    "nothing is created, and the Idempotency-Key is not used."
)


def dry_run_field() -> serializers.BooleanField:
    """The `dry_run` field of an order's body."""
    return serializers.BooleanField(default=False, help_text=DRY_RUN_HELP)


class DryRunInput(InputSerializer):
    """The optional body of a start: `{"dry_run": true}`."""

    dry_run = dry_run_field()


def dry_run_asked(request: Request) -> bool:
    """Whether a start's body (which may be empty) asks for a dry run."""
    data = request.data if isinstance(request.data, dict) else {}
    serializer = DryRunInput(data=data)
    serializer.is_valid(raise_exception=True)
    return bool(serializer.validated_data["dry_run"])


DRY_RUN_PARAM = OpenApiParameter(
    "dry_run",
    bool,
    description="The same as the body's dry_run (for a body that cannot say it, such as a "
    "SkyPilot task YAML): only say what the order would cost and whether it would be taken.",
)


class _DryRunQuery(InputSerializer):
    dry_run = dry_run_field()


def dry_run_queried(request: Request) -> bool:
    """Whether the query asks for a dry run (`?dry_run=true`); a value that is not a
    boolean is a 400 naming the parameter."""
    data = {"dry_run": request.query_params["dry_run"]} if "dry_run" in request.query_params else {}
    serializer = _DryRunQuery(data=data)
    serializer.is_valid(raise_exception=True)
    return bool(serializer.validated_data["dry_run"])


class QuoteOutput(serializers.Serializer[Any]):
    price_per_hour_fen = serializers.IntegerField(
        help_text="An hour of the order at the prices that pay it (all its units)."
    )
    paid_by = serializers.ChoiceField(choices=["trial", "cash"])
    runway_hours = serializers.FloatField(
        allow_null=True,
        help_text="How long the money that pays it lasts at its price plus what your other "
        "instances burn; null when nothing burns by the hour.",
    )
    queue_position = serializers.IntegerField(
        allow_null=True, help_text="Its place in the queue (1 = next) if it would wait."
    )
    expected_start_s = serializers.IntegerField(
        allow_null=True, help_text="0: GPUs at once; null: it would wait, or starts later."
    )
    price_per_month_fen = serializers.IntegerField(
        allow_null=True, help_text="A monthly rental's month; null when hourly."
    )


REFUSAL_SCHEMA = {
    "type": "object",
    "nullable": True,
    "description": "null: it would be taken; else the error body the real order would get, "
    "with its HTTP status.",
    "properties": {
        "status": {"type": "integer", "description": "The HTTP status the real order gets."},
        "detail": {"type": "string"},
        "code": {"type": "string"},
        "errors": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
    "required": ["status", "code", "detail"],
}


@extend_schema_field(REFUSAL_SCHEMA)
class RefusalField(serializers.DictField):
    """The refusal: an error body (starverse.core.api.errors) with its status, or null."""


class DryRunOutput(serializers.Serializer[Any]):
    quote = QuoteOutput(allow_null=True)
    refusal = RefusalField(allow_null=True)


DRY_RUN_RESPONSE = OpenApiResponse(
    response=DryRunOutput, description="With dry_run: true, the quote and any refusal."
)


def dry_run_answer(quote: dict[str, Any] | None, refusal: ServiceError | None) -> Response:
    """The answer of a dry run: 200, the quote and the refusal's error body (with its
    status), as the real order would have answered it."""
    body = None
    if refusal is not None:
        body = {"status": refusal.status_code, **service_error_body(refusal)}
    return Response({"quote": quote, "refusal": body})
