from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import (
    BalanceOutput,
    LedgerOutput,
    TcoInput,
    TcoOutput,
    TopUpCreateInput,
    TopUpOutput,
)
from billing.calculator import tco_compare
from billing.holds import tenant_on_hold
from billing.models import LedgerTransaction, TopUp
from billing.payments import topup_create, topup_refresh
from billing.selectors import wallet_for_tenant
from starverse.accounts.audit import audit_request
from starverse.accounts.models import Scope
from starverse.core.api.auth import signed_in_user
from starverse.core.api.schema import errors
from starverse.core.api.views import TenantScopedViewSet
from starverse.core.roles import require_payer


class BalanceView(APIView):
    @extend_schema(operation_id="billing_balance_retrieve", responses=BalanceOutput)
    def get(self, request: Request) -> Response:
        wallet = wallet_for_tenant(signed_in_user(request).tenant_id)
        return Response(
            {
                "cash_fen": wallet.cash_fen,
                "promo_fen": wallet.promo_fen,
                "arrears_fen": wallet.arrears_fen,
                "total_fen": wallet.total_fen,
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
        return queryset.order_by("-created_at", "-id")


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


class TcoView(APIView):
    """Public: compare buying, a traditional cloud and Starverse for one training job."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(operation_id="calculator_tco", request=TcoInput, responses=TcoOutput)
    def post(self, request: Request) -> Response:
        data = TcoInput(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(tco_compare(data.validated_data))
