from django.utils.translation import gettext as _
from rest_framework import serializers

from billing.models import LedgerTransaction


class BalanceOutput(serializers.Serializer):
    cash_fen = serializers.IntegerField()
    promo_fen = serializers.IntegerField()
    total_fen = serializers.IntegerField()
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
        return obj.cash_after_fen + obj.promo_after_fen
