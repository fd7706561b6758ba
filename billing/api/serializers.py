from decimal import Decimal
from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.models import LedgerTransaction, TopUp
from starverse.core.api.serializers import InputSerializer, StrictIntegerField


class BalanceOutput(serializers.Serializer):
    cash_fen = serializers.IntegerField()
    promo_fen = serializers.IntegerField()
    arrears_fen = serializers.IntegerField(
        help_text="Owed after a chargeback or refund took more than the cash held; "
        "the next top-up pays it first."
    )
    total_fen = serializers.IntegerField(help_text="cash + trial credit − arrears.")
    on_hold = serializers.BooleanField(
        help_text="New instances, starts and storage are refused (403 account_on_hold) until "
        "support lifts the hold; top-ups still work."
    )
    currency = serializers.CharField()


class LedgerOutput(serializers.ModelSerializer):
    description = serializers.SerializerMethodField()
    instance = serializers.SerializerMethodField()
    balance_after_fen = serializers.SerializerMethodField()

    class Meta:
        model = LedgerTransaction
        fields = [
            "id",
            "kind",
            "amount_fen",
            "cash_delta_fen",
            "promo_delta_fen",
            "arrears_delta_fen",
            "balance_after_fen",
            "created_at",
            "description",
            "instance",
        ]

    def get_description(self, obj: LedgerTransaction) -> str:
        return _(obj.description)

    def get_instance(self, obj: LedgerTransaction) -> str | None:
        return obj.instance_id or None

    def get_balance_after_fen(self, obj: LedgerTransaction) -> int:
        return obj.balance_after_fen


# The ways to pay that Stripe Checkout offers here; an operator enables some of them
# (STRIPE_PAYMENT_METHODS) and a top-up may ask for one.
PAYMENT_METHODS = [("card", "Card"), ("alipay", "Alipay"), ("wechat_pay", "WeChat Pay")]


class TopUpCreateInput(InputSerializer):
    amount_fen = StrictIntegerField()
    payment_method = serializers.ChoiceField(
        choices=PAYMENT_METHODS,
        required=False,
        help_text="Offer only this way to pay on the checkout page (one the operator enabled, "
        "STRIPE_PAYMENT_METHODS). Omitted: every enabled one.",
    )


class TopUpOutput(serializers.ModelSerializer):
    checkout_url = serializers.CharField(help_text="Stripe Checkout's page; empty until it opens.")

    class Meta:
        model = TopUp
        fields = ["id", "status", "method", "amount_fen", "checkout_url", "created_at", "paid_at"]


@extend_schema_field(
    {"oneOf": [{"type": "number", "minimum": 0}, {"type": "string", "format": "decimal"}]}
)
class _Number(serializers.DecimalField):
    """A non-negative number given as JSON number or string, kept exact (no float)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_digits", 20)
        kwargs.setdefault("decimal_places", 6)
        kwargs.setdefault("min_value", 0)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class TcoBuyInput(InputSerializer):
    gpu_unit_fen = StrictIntegerField(min_value=0)
    other_capex_fen = StrictIntegerField(min_value=0)
    opex_fen = StrictIntegerField(min_value=0)
    years = StrictIntegerField(min_value=1, max_value=30)
    power_kw = _Number()
    electricity_fen_per_kwh = _Number()


class TcoCloudInput(InputSerializer):
    gpus_per_node = StrictIntegerField(min_value=1, max_value=64)
    node_month_fen = StrictIntegerField(min_value=0)
    egress_gb = _Number()
    egress_fen_per_gb = _Number()


class TcoStarverseInput(InputSerializer):
    gpus_per_node = StrictIntegerField(min_value=1, max_value=64)
    node_month_fen = StrictIntegerField(min_value=0)


class TcoInput(InputSerializer):
    gpus = StrictIntegerField(min_value=1, max_value=1_000_000)
    duration_days = _Number(min_value=Decimal("0.000001"), max_value=36500)
    buy = TcoBuyInput()
    cloud = TcoCloudInput()
    starverse = TcoStarverseInput()


class TcoLineOutput(serializers.Serializer):
    # A field named `label`: the serializer's metaclass moves it out of the class attributes,
    # where the stubs see Field.label.
    label = serializers.CharField()  # type: ignore[assignment]
    formula = serializers.CharField()
    amount_fen = serializers.IntegerField()


class TcoOptionOutput(serializers.Serializer):
    per_month_fen = serializers.IntegerField()
    job_fen = serializers.IntegerField()
    lines = TcoLineOutput(many=True)


class TcoBuyOutput(TcoOptionOutput):
    lifetime_fen = serializers.IntegerField()


class TcoOutput(serializers.Serializer):
    months = serializers.CharField(help_text="The job's length in months, as a decimal.")
    buy = TcoBuyOutput()
    cloud = TcoOptionOutput()
    starverse = TcoOptionOutput()
