from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import Field

from billing.choices import InvoiceKind
from billing.invoices import PROFILE_FIELDS
from billing.models import InvoiceRequest, LedgerTransaction, Statement, TopUp
from billing.usage import GROUPINGS
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField
from starverse.core.dates import validate_day


class BalanceOutput(serializers.Serializer[Mapping[str, object]]):
    cash_fen = serializers.IntegerField(help_text="Cash free to spend.")
    promo_fen = serializers.IntegerField(help_text="Trial credit free to spend.")
    pending_fen = serializers.IntegerField(
        help_text="GPU minutes used since their last hourly posting to the ledger: already "
        "taken off cash_fen, promo_fen and total_fen, posted by the hour and at every stop."
    )
    arrears_fen = serializers.IntegerField(
        help_text="Owed after a chargeback or refund took more than the cash held; "
        "the next top-up pays it first."
    )
    total_fen = serializers.IntegerField(
        help_text="cash + trial credit − arrears, free of the usage accrued (pending_fen)."
    )
    on_hold = serializers.BooleanField(
        help_text="New instances, starts and storage are refused (403 account_on_hold) until "
        "support lifts the hold; top-ups still work."
    )
    currency = serializers.CharField()


class LedgerOutput(serializers.ModelSerializer[LedgerTransaction]):
    description = serializers.SerializerMethodField()
    # A field named `instance`: the metaclass moves it out of the class attributes, where the
    # stubs see the serializer's own BaseSerializer.instance.
    instance = serializers.SerializerMethodField()  # type: ignore[assignment]
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
            "price_kind",
            "minutes",
            "instance",
            "seq",
        ]
        extra_kwargs = {
            "seq": {
                "help_text": "Its place in the wallet's ledger: 1, 2, 3 … in the order it was "
                "posted (lines of one moment share created_at). The list is newest first by it."
            },
            "minutes": {
                "help_text": "Usage of GPUs: the minutes this line pays (an hour's posting, or "
                "the rest of a session at its stop); 0 for other kinds, and for lines posted "
                "one per minute before hourly postings."
            },
            "price_kind": {
                "help_text": "Usage: `trial` (paid from trial credit at the offering's trial "
                "price) or `standard` (from cash at its price); blank for other kinds."
            },
        }

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


class TopUpOutput(serializers.ModelSerializer[TopUp]):
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

    def to_internal_value(self, data: Any) -> Decimal:  # data: any JSON value
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class TcoBuyInput(InputSerializer):
    gpu_unit_fen = StrictIntegerField(min_value=0)
    other_capex_fen = StrictIntegerField(min_value=0)
    opex_fen = StrictIntegerField(min_value=0)
    years = StrictIntegerField(min_value=1, max_value=30)
    power_kw = _Number()
    pue = _Number(
        min_value=1,
        max_value=3,
        required=False,
        default=Decimal(1),
        help_text="The data centre's power usage effectiveness: the power drawn is power_kw × "
        "pue. 1 when omitted.",
    )
    electricity_fen_per_kwh = _Number()


class TcoCloudInput(InputSerializer):
    gpus_per_node = StrictIntegerField(min_value=1, max_value=64)
    node_month_fen = StrictIntegerField(min_value=0)
    egress_gb = _Number()
    egress_fen_per_gb = _Number()


class TcoStarverseInput(InputSerializer):
    offering = StrictCharField(
        max_length=64,
        help_text="An active offering of the catalog, by slug (e.g. h100-80g-bare-metal) or id: "
        "the Starverse column is its price, as on Rent.",
    )


class TcoInput(InputSerializer):
    gpus = StrictIntegerField(min_value=1, max_value=1_000_000)
    duration_days = _Number(min_value=Decimal("0.000001"), max_value=36500)
    buy = TcoBuyInput()
    cloud = TcoCloudInput()
    starverse = TcoStarverseInput()


class TcoLineOutput(serializers.Serializer[Mapping[str, object]]):
    # A field named `label`: the serializer's metaclass moves it out of the class attributes,
    # where the stubs see Field.label.
    label = serializers.CharField()  # type: ignore[assignment]
    formula = serializers.CharField()
    amount_fen = serializers.IntegerField()


class TcoOptionOutput(serializers.Serializer[Mapping[str, object]]):
    per_month_fen = serializers.IntegerField()
    job_fen = serializers.IntegerField()
    lines = TcoLineOutput(many=True)


class TcoBuyOutput(TcoOptionOutput):
    lifetime_fen = serializers.IntegerField()


class TcoOfferingOutput(serializers.Serializer[Mapping[str, object]]):
    id = serializers.CharField()
    slug = serializers.CharField(allow_null=True)
    name = serializers.CharField(help_text="In the request's language (Accept-Language).")
    gpu_count = serializers.IntegerField()
    price_per_hour_fen = serializers.IntegerField()
    price_per_month_fen = serializers.IntegerField(allow_null=True)


class TcoStarverseOutput(TcoOptionOutput):
    offering = TcoOfferingOutput(help_text="The catalog offering priced, at its price now.")


class TcoOutput(serializers.Serializer[Mapping[str, object]]):
    months = serializers.CharField(help_text="The job's length in months, as a decimal.")
    buy = TcoBuyOutput()
    cloud = TcoOptionOutput()
    starverse = TcoStarverseOutput()


class InvoiceProfileInput(InputSerializer):
    """The whole profile (PUT replaces it); the service checks the tax number and what a
    special invoice needs, naming the field."""

    kind = serializers.ChoiceField(choices=InvoiceKind.choices, default=InvoiceKind.GENERAL)
    title = serializers.CharField(max_length=200)
    tax_number = serializers.CharField(max_length=40, required=False, allow_blank=True)
    address = serializers.CharField(max_length=300, required=False, allow_blank=True)
    phone = serializers.CharField(max_length=40, required=False, allow_blank=True)
    bank = serializers.CharField(max_length=200, required=False, allow_blank=True)
    bank_account = serializers.CharField(max_length=64, required=False, allow_blank=True)
    email = serializers.EmailField()


class InvoiceProfileOutput(serializers.Serializer[Mapping[str, object]]):
    kind = serializers.ChoiceField(choices=InvoiceKind.choices)
    title = serializers.CharField()
    tax_number = serializers.CharField()
    address = serializers.CharField()
    phone = serializers.CharField()
    bank = serializers.CharField()
    bank_account = serializers.CharField()
    email = serializers.CharField()
    updated_at = serializers.DateTimeField(allow_null=True, help_text="Null until saved.")
    invoiceable_fen = serializers.IntegerField(
        help_text="What can still be invoiced: paid top-ups and bank transfers, less refunds, "
        "chargebacks and invoices requested or issued."
    )


class InvoiceCreateInput(InputSerializer):
    amount_fen = StrictIntegerField()


class InvoiceOutput(serializers.ModelSerializer[InvoiceRequest]):
    profile = serializers.SerializerMethodField()
    pdf_url = serializers.SerializerMethodField()
    reason = serializers.SerializerMethodField()

    class Meta:
        model = InvoiceRequest
        fields = [
            "id",
            "status",
            "amount_fen",
            "number",
            "profile",
            "pdf_url",
            "reason",
            "created_at",
            "issued_at",
        ]

    @extend_schema_field(
        {
            "type": "object",
            "description": "The invoice profile as it was when requested.",
            "properties": {name: {"type": "string"} for name in PROFILE_FIELDS},
        }
    )
    def get_profile(self, obj: InvoiceRequest) -> dict[str, str]:
        return {name: str(obj.profile.get(name, "")) for name in PROFILE_FIELDS}

    def get_pdf_url(self, obj: InvoiceRequest) -> str | None:
        """The API path of the issued PDF, or null while there is none."""
        return f"/api/v1/billing/invoices/{obj.id}/pdf" if obj.pdf else None

    def get_reason(self, obj: InvoiceRequest) -> str:
        """Why it was rejected; empty otherwise."""
        return obj.note if obj.status == "rejected" else ""


class StatementOutput(serializers.ModelSerializer[Statement]):
    id = serializers.SerializerMethodField()
    month = serializers.SerializerMethodField()
    pdf_url = serializers.SerializerMethodField()
    csv_url = serializers.SerializerMethodField()
    final = serializers.BooleanField(
        read_only=True,
        help_text="False for the current month: its figures so far, cut at `as_of`, made on "
        "each request and never stored.",
    )
    as_of = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="Where the month so far was cut; null if final."
    )

    class Meta:
        model = Statement
        fields = [
            "id",
            "month",
            "opening_fen",
            "closing_fen",
            "opening_cash_fen",
            "opening_promo_fen",
            "closing_cash_fen",
            "closing_promo_fen",
            "credits_fen",
            "debits_fen",
            "lines",
            "pdf_url",
            "csv_url",
            "generated_at",
            "final",
            "as_of",
        ]

    def get_id(self, obj: Statement) -> str | None:
        """The stored statement's id; null for the month so far."""
        return obj.id if obj.final else None

    def get_month(self, obj: Statement) -> str:
        """YYYY-MM."""
        return f"{obj.month:%Y-%m}"

    def get_pdf_url(self, obj: Statement) -> str:
        return f"/api/v1/billing/statements/{obj.month:%Y-%m}/pdf"

    def get_csv_url(self, obj: Statement) -> str:
        return f"/api/v1/billing/statements/{obj.month:%Y-%m}/csv"


# A serializer's fields by name, as get_fields answers them; each field has its own value, data
# and representation types, so the map's are Any.
FieldMap = dict[str, Field[Any, Any, Any, Any]]


class UsageInput(serializers.Serializer[None]):
    # Query parameters, named in the errors as they are in the URL.
    from_ = serializers.DateField(input_formats=["%Y-%m-%d"], validators=[validate_day])
    to = serializers.DateField(input_formats=["%Y-%m-%d"], validators=[validate_day])
    group_by = serializers.ChoiceField(choices=GROUPINGS, default="instance")

    def get_fields(self) -> FieldMap:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class UsageRowOutput(serializers.Serializer[Mapping[str, object]]):
    key = serializers.CharField(
        help_text="Instance or volume id, day (YYYY-MM-DD) or member (user id); `account` "
        "for storage and charges of the whole account."
    )
    # `label` is a Serializer's own attribute: the field is renamed as UsageInput's "from" is
    label_ = serializers.CharField()
    minutes = serializers.IntegerField(help_text="GPU-instance minutes charged per minute.")
    gpu_hours = serializers.FloatField(help_text="minutes × GPUs ÷ 60, to two decimals.")
    amount_fen = serializers.IntegerField()

    def get_fields(self) -> FieldMap:
        fields = super().get_fields()
        fields["label"] = fields.pop("label_")
        return {
            name: fields[name] for name in ("key", "label", "minutes", "gpu_hours", "amount_fen")
        }


class UsageTotalsOutput(serializers.Serializer[Mapping[str, object]]):
    minutes = serializers.IntegerField()
    gpu_hours = serializers.FloatField()
    amount_fen = serializers.IntegerField()


class UsageOutput(serializers.Serializer[Mapping[str, object]]):
    # "from" is a keyword: the field is renamed as UsageInput's is
    from_ = serializers.DateField()
    to = serializers.DateField()
    group_by = serializers.CharField()
    rows = UsageRowOutput(many=True)
    totals = UsageTotalsOutput()

    def get_fields(self) -> FieldMap:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields
