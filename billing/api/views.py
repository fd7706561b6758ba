from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.api.serializers import BalanceOutput, LedgerOutput
from billing.models import LedgerTransaction
from billing.selectors import wallet_for_tenant
from starverse.core.api.views import TenantScopedViewSet


class BalanceView(APIView):
    @extend_schema(responses=BalanceOutput)
    def get(self, request: Request) -> Response:
        wallet = wallet_for_tenant(request.user.tenant_id)
        return Response(
            {
                "cash_fen": wallet.cash_fen,
                "promo_fen": wallet.promo_fen,
                "total_fen": wallet.total_fen,
                "currency": "CNY",
            }
        )


class LedgerViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """The caller's ledger, newest first."""

    model = LedgerTransaction
    owner_field = "wallet__tenant"
    serializer_class = LedgerOutput

    def filter_queryset_extra(self, queryset: QuerySet) -> QuerySet:
        return queryset.order_by("-created_at", "-id")
