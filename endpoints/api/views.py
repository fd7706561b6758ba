from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from compute.dryrun import order_dry_run
from endpoints.api.serializers import (
    EndpointChangeInput,
    EndpointCreateInput,
    EndpointOutput,
    KeyCreatedOutput,
    KeyCreateInput,
    KeyOutput,
    MetricsOutput,
)
from endpoints.choices import EndpointStatus
from endpoints.metrics import endpoint_metrics
from endpoints.models import Endpoint
from endpoints.selectors import endpoint_keys, endpoint_view
from endpoints.services import (
    endpoint_change,
    endpoint_create,
    endpoint_delete,
    key_create,
    key_revoke,
)
from starverse.accounts.audit import audit_request
from starverse.core.api.auth import signed_in_user
from starverse.core.api.dryrun import DRY_RUN_RESPONSE, dry_run_answer
from starverse.core.api.pagination import Pagination, WholeList
from starverse.core.api.schema import IDEMPOTENCY_KEY, errors, idempotency_key, on_hold_error
from starverse.core.api.views import TenantScopedViewSet

FIELD_NAMED = {
    400: "`errors` names the field: `engine_options.<key>` for an option the engine does not "
    "know, `source.disk` / `source.path` / `source.nas_path` / `source.dataset` for a source "
    "that is not there or not a model, `max_replicas` beyond the account's GPU limit."
}


class EndpointViewSet(TenantScopedViewSet[Endpoint]):
    """Inference endpoints of the caller's tenant. Asynchronous operations answer 202."""

    model = Endpoint
    owner_field = "tenant"
    # It reads an endpoint's view (endpoints.selectors.endpoint_view), not the row the stubs expect.
    serializer_class = EndpointOutput  # type: ignore[assignment]

    def filter_queryset_extra(self, queryset: QuerySet[Endpoint]) -> QuerySet[Endpoint]:
        return queryset.select_related("offering")

    def _out(self, endpoint: Endpoint, code: int = status.HTTP_200_OK) -> Response:
        endpoint = self.get_queryset().get(pk=endpoint.pk)
        return Response(EndpointOutput(endpoint_view(endpoint)).data, status=code)

    @extend_schema(operation_id="endpoints_list", responses={200: EndpointOutput(many=True)})
    def list(self, request: Request) -> Response:
        """The tenant's endpoints, newest first (deleted ones left out)."""
        paginator = Pagination()
        rows = self.get_queryset().exclude(status=EndpointStatus.DELETED).order_by("-created_at")
        page = paginator.paginate_queryset(rows, request)
        return paginator.get_paginated_response(
            [EndpointOutput(endpoint_view(e)).data for e in page or []]
        )

    @extend_schema(operation_id="endpoints_retrieve", responses={200: EndpointOutput})
    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return self._out(self.get_object())

    @extend_schema(
        operation_id="endpoints_create",
        request=EndpointCreateInput,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            200: DRY_RUN_RESPONSE,
            202: EndpointOutput,
            **errors(402, 409, also=FIELD_NAMED),
            **on_hold_error(),
        },
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, EndpointCreateInput)
        user = signed_in_user(request)

        def order(key: str) -> tuple[Endpoint, bool]:
            return endpoint_create(
                user=user,
                name=data["name"],
                source=dict(data["source"]),
                engine=data["engine"],
                offering_id=data["offering"],
                min_replicas=data["min_replicas"],
                max_replicas=data["max_replicas"],
                engine_options=data.get("engine_options") or {},
                idempotency_key=key,
            )

        if data["dry_run"]:
            return dry_run_answer(*order_dry_run(lambda: order("")).parts())
        endpoint, _created = order(idempotency_key(request))
        if _created:
            audit_request(
                request,
                "endpoint.created",
                endpoint,
                name=endpoint.name,
                offering=endpoint.offering_id,
            )
        return self._out(endpoint, status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="endpoints_partial_update",
        request=EndpointChangeInput,
        responses={
            200: DRY_RUN_RESPONSE,
            202: EndpointOutput,
            **errors(402, 409, also=FIELD_NAMED),
        },
        description="Scale (min/max: the autoscaler's bounds, applied at once), change engine "
        "options, or `update`: a new snapshot of the source, replicas rolled one by one.",
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        found = self.get_object()
        data = self.parse(request, EndpointChangeInput)

        def change() -> Endpoint:
            return endpoint_change(
                endpoint=found,
                min_replicas=data.get("min_replicas"),
                max_replicas=data.get("max_replicas"),
                engine_options=data.get("engine_options"),
                update=data["update"],
                actor=signed_in_user(request),
            )

        if data["dry_run"]:
            return dry_run_answer(*order_dry_run(change).parts())
        endpoint = change()
        audit_request(
            request,
            "endpoint.changed",
            endpoint,
            min_replicas=endpoint.min_replicas,
            max_replicas=endpoint.max_replicas,
            update=data["update"],
        )
        return self._out(endpoint, status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="endpoints_destroy", request=None, responses={202: EndpointOutput})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        endpoint = endpoint_delete(endpoint=self.get_object())
        audit_request(request, "endpoint.deleted", endpoint, name=endpoint.name)
        return self._out(endpoint, status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="endpoints_metrics_retrieve", responses={200: MetricsOutput})
    @action(detail=True, methods=["get"])
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        """The last hour: requests/s, latency p50/p99 (ms), tokens/s, replicas Ready."""
        return Response({"results": endpoint_metrics(self.get_object())})

    @extend_schema(operation_id="endpoints_keys_list", responses={200: KeyOutput(many=True)})
    @action(detail=True, methods=["get"], url_path="keys", pagination_class=WholeList)
    def keys(self, request: Request, pk: str | None = None) -> Response:
        rows = endpoint_keys(self.get_object())
        # many=True takes a list of rows (DRF's __new__ makes a ListSerializer); the stubs, one.
        listed = KeyOutput(rows, many=True)  # type: ignore[arg-type]
        return WholeList().get_paginated_response(listed.data)

    @extend_schema(
        operation_id="endpoints_keys_create",
        request=KeyCreateInput,
        responses={201: KeyCreatedOutput, **errors(409)},
    )
    @keys.mapping.post
    def key_add(self, request: Request, pk: str | None = None) -> Response:
        endpoint = self.get_object()
        data = self.parse(request, KeyCreateInput)
        key, secret = key_create(
            endpoint=endpoint, name=data.get("name", ""), user=signed_in_user(request)
        )
        audit_request(request, "endpoint.key_created", key, endpoint=endpoint.pk, name=key.name)
        body = {**KeyOutput(key).data, "key": secret}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(operation_id="endpoints_keys_destroy", request=None, responses={204: None})
    @action(
        detail=True,
        methods=["delete"],
        url_path=r"keys/(?P<key_id>[A-Za-z0-9_]+)",
    )
    def key_remove(self, request: Request, pk: str | None = None, key_id: str = "") -> Response:
        endpoint = self.get_object()
        revoked = key_revoke(endpoint=endpoint, key_id=key_id)
        audit_request(request, "endpoint.key_revoked", revoked, endpoint=endpoint.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
