from collections.abc import Mapping
from typing import IO, Any

from django.db.models import QuerySet
from django.http import FileResponse, HttpResponse, HttpResponseBase
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import (
    BalanceOutput,
    InvoiceCreateInput,
    InvoiceOutput,
    InvoiceProfileInput,
    InvoiceProfileOutput,
    LedgerOutput,
    StatementOutput,
    TopUpCreateInput,
    TopUpOutput,
    UsageInput,
    UsageOutput,
)
from billing.holds import tenant_on_hold
from billing.invoices import (
    PROFILE_FIELDS,
    invoice_profile_for,
    invoice_profile_save,
    invoice_request,
    invoiceable_fen,
)
from billing.models import InvoiceRequest, LedgerTransaction, Statement, TopUp
from billing.payments import topup_create, topup_refresh
from billing.selectors import wallet_for_tenant
from billing.statements import (
    STATEMENT_FORMATS,
    parse_month,
    statement_content,
    statement_for,
    stored_file,
)
from billing.usage import MAX_RANGE_DAYS, usage_csv, usage_report
from starverse.accounts.audit import audit_request
from starverse.accounts.models import Scope
from starverse.core.api.auth import signed_in_user
from starverse.core.api.schema import IDEMPOTENCY_KEY, errors, idempotency_key
from starverse.core.api.views import TenantScopedViewSet
from starverse.core.errors import FieldInvalid, NotFound
from starverse.core.roles import PAYERS, require_payer, require_role


class BalanceView(APIView):
    @extend_schema(operation_id="billing_balance_retrieve", responses=BalanceOutput)
    def get(self, request: Request) -> Response:
        wallet = wallet_for_tenant(signed_in_user(request).tenant_id)
        return Response(
            {
                **wallet.balance_shown(),
                "arrears_fen": wallet.arrears_fen,
                "on_hold": tenant_on_hold(wallet.tenant_id),
                "currency": "CNY",
            }
        )


@extend_schema_view(
    list=extend_schema(operation_id="billing_ledger_list"),
    retrieve=extend_schema(operation_id="billing_ledger_retrieve"),
)
class LedgerViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet[LedgerTransaction]
):
    """The caller's ledger, newest first."""

    model = LedgerTransaction
    owner_field = "wallet__tenant"
    serializer_class = LedgerOutput

    def filter_queryset_extra(
        self, queryset: QuerySet[LedgerTransaction]
    ) -> QuerySet[LedgerTransaction]:
        return queryset.order_by("-seq")  # in the order it was posted


@extend_schema_view(
    list=extend_schema(operation_id="billing_topups_list"),
    retrieve=extend_schema(operation_id="billing_topups_retrieve"),
)
class TopUpViewSet(mixins.ListModelMixin, TenantScopedViewSet[TopUp]):
    """Top-ups through Stripe Checkout: create one, then send the user to `checkout_url`."""

    model = TopUp
    owner_field = "tenant"
    serializer_class = TopUpOutput
    token_scope = Scope.BILLING

    @extend_schema(
        operation_id="billing_topups_create",
        request=TopUpCreateInput,
        responses={201: TopUpOutput, **errors(503)},
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, TopUpCreateInput)
        user = signed_in_user(request)
        require_payer(user)
        topup = topup_create(
            user=user,
            amount_fen=data["amount_fen"],
            payment_method=data.get("payment_method", ""),
        )
        audit_request(request, "topup.created", topup, amount_fen=topup.amount_fen)
        return Response(self.output(topup), status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(self.output(topup_refresh(topup=self.get_object())))


class _FileRenderer(BaseRenderer):
    """Lets a client that asks for the file's type (Accept, or ?format=) have it: the view
    answers the file itself, so there is nothing to render."""

    charset = None

    def render(
        self,
        data: Any,  # an error answer's body, any JSON
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        # only an error answer comes here (a file is answered as it is): it stays JSON
        return JSONRenderer().render(data)


class PdfRenderer(_FileRenderer):
    media_type = "application/pdf"
    format = "pdf"


class CsvRenderer(_FileRenderer):
    media_type = "text/csv"
    format = "csv"


def _download(content: IO[bytes] | None, filename: str, content_type: str) -> FileResponse:
    """A file as an attachment: a stored one read through the storage (media is never
    public), or one drawn for this answer."""
    if content is None:
        raise NotFound(_("There is no file to download yet."), code="no_file")
    return FileResponse(content, as_attachment=True, filename=filename, content_type=content_type)


class InvoiceProfileView(APIView):
    """The tenant's invoice details (发票信息), and what can still be invoiced."""

    token_scope = Scope.BILLING

    def _answer(self, tenant_id: str) -> Response:
        profile = invoice_profile_for(tenant_id)
        body: dict[str, object] = {
            name: getattr(profile, name) if profile else "" for name in PROFILE_FIELDS
        }
        body["kind"] = body["kind"] or "general"
        body["updated_at"] = profile.updated_at if profile else None
        body["invoiceable_fen"] = invoiceable_fen(tenant_id)
        return Response(InvoiceProfileOutput(body).data)

    @extend_schema(operation_id="billing_invoice_profile_retrieve", responses=InvoiceProfileOutput)
    def get(self, request: Request) -> Response:
        return self._answer(signed_in_user(request).tenant_id)

    @extend_schema(
        operation_id="billing_invoice_profile_update",
        request=InvoiceProfileInput,
        responses=InvoiceProfileOutput,
    )
    def put(self, request: Request) -> Response:
        data = InvoiceProfileInput(data=request.data)
        data.is_valid(raise_exception=True)
        user = signed_in_user(request)
        require_role(user, PAYERS, _("changing the invoice details"))
        tenant_id = user.tenant_id
        invoice_profile_save(tenant_id=tenant_id, data=dict(data.validated_data))
        return self._answer(tenant_id)


@extend_schema_view(
    list=extend_schema(operation_id="billing_invoices_list"),
    retrieve=extend_schema(operation_id="billing_invoices_retrieve"),
)
class InvoiceViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet[InvoiceRequest]
):
    """Invoice (发票) requests over paid top-ups, newest first."""

    model = InvoiceRequest
    owner_field = "tenant"
    serializer_class = InvoiceOutput
    token_scope = Scope.BILLING

    @extend_schema(
        operation_id="billing_invoices_create",
        request=InvoiceCreateInput,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: InvoiceOutput,
            200: OpenApiResponse(InvoiceOutput, description="A repeat of an earlier request."),
            **errors(409),
        },
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, InvoiceCreateInput)
        user = signed_in_user(request)
        require_role(user, PAYERS, _("requesting an invoice"))
        item, created = invoice_request(
            user=user,
            amount_fen=data["amount_fen"],
            idempotency_key=idempotency_key(request),
        )
        return Response(
            self.output(item), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )

    @extend_schema(
        operation_id="billing_invoices_pdf",
        responses={(200, "application/pdf"): OpenApiTypes.BINARY},
    )
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer, PdfRenderer])
    def pdf(self, request: Request, pk: str | None = None) -> HttpResponseBase:
        """The issued invoice's PDF; 404 until it is issued with one."""
        item = self.get_object()
        return _download(
            stored_file(item.pdf), f"invoice-{item.number or item.id}.pdf", "application/pdf"
        )


MONTH = OpenApiParameter("month", str, OpenApiParameter.PATH, description="YYYY-MM")


@extend_schema_view(list=extend_schema(operation_id="billing_statements_list"))
class StatementViewSet(mixins.ListModelMixin, TenantScopedViewSet[Statement]):
    """Monthly statements (对账单). A closed month's is made on first request if the monthly
    run has not made it."""

    model = Statement
    owner_field = "tenant"
    serializer_class = StatementOutput
    lookup_field = "month"
    lookup_value_regex = "[^/.]+"  # YYYY-MM; anything else is a 400 naming the month

    def _statement(self, request: Request, month: str | None) -> Statement:
        return statement_for(
            tenant_id=signed_in_user(request).tenant_id, month=parse_month(month or "")
        )

    @extend_schema(
        operation_id="billing_statements_retrieve",
        parameters=[MONTH],
        responses={200: StatementOutput, **errors(400)},
    )
    def retrieve(self, request: Request, month: str | None = None) -> Response:
        return Response(self.output(self._statement(request, month)))

    @extend_schema(
        operation_id="billing_statements_pdf",
        parameters=[MONTH],
        responses={(200, "application/pdf"): OpenApiTypes.BINARY, **errors(400)},
    )
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer, PdfRenderer])
    def pdf(self, request: Request, month: str | None = None) -> HttpResponseBase:
        return self._file(request, month, "pdf")

    @extend_schema(
        operation_id="billing_statements_csv",
        parameters=[MONTH],
        responses={(200, "text/csv"): OpenApiTypes.BINARY, **errors(400)},
    )
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer, CsvRenderer])
    def csv(self, request: Request, month: str | None = None) -> HttpResponseBase:
        return self._file(request, month, "csv")

    def _file(self, request: Request, month: str | None, fmt: str) -> FileResponse:
        when = parse_month(month or "")
        content = statement_content(
            tenant_id=signed_in_user(request).tenant_id, month=when, fmt=fmt
        )
        return _download(content, f"statement-{when:%Y-%m}.{fmt}", STATEMENT_FORMATS[fmt])


class UsageView(APIView):
    """Usage over a range of days (at most 366), by instance, day or member; `?format=csv` or
    `Accept: text/csv` for a CSV file."""

    renderer_classes = [JSONRenderer, CsvRenderer]

    @extend_schema(
        operation_id="billing_usage",
        parameters=[
            OpenApiParameter("from", OpenApiTypes.DATE, required=True),
            OpenApiParameter("to", OpenApiTypes.DATE, required=True, description="Inclusive."),
            OpenApiParameter("group_by", str, enum=["instance", "day", "member"]),
            OpenApiParameter("format", str, enum=["json", "csv"]),
        ],
        responses={
            (200, "application/json"): UsageOutput,
            (200, "text/csv"): OpenApiTypes.BINARY,
            **errors(400),
        },
    )
    def get(self, request: Request) -> HttpResponseBase:
        query = UsageInput(data=request.query_params)
        query.is_valid(raise_exception=True)
        start, end = query.validated_data["from"], query.validated_data["to"]
        if start > end:
            raise FieldInvalid("to", _("to: the last day comes before the first (from)."))
        if (end - start).days + 1 > MAX_RANGE_DAYS:
            raise FieldInvalid(
                "to", _("to: at most %(days)d days at once.") % {"days": MAX_RANGE_DAYS}
            )
        report = usage_report(
            tenant_id=signed_in_user(request).tenant_id,
            start=start,
            end=end,
            group_by=query.validated_data["group_by"],
        )
        if request.accepted_renderer.format == "csv":
            response = HttpResponse(usage_csv(report), content_type="text/csv; charset=utf-8")
            name = f"usage-{start:%Y%m%d}-{end:%Y%m%d}-{report.group_by}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
            return response
        totals = report.totals.as_dict()
        return Response(
            {
                "from": start,
                "to": end,
                "group_by": report.group_by,
                "rows": [row.as_dict() for row in report.rows],
                "totals": {k: totals[k] for k in ("minutes", "gpu_hours", "amount_fen")},
            }
        )
