"""Operator screens for wallets, the ledger, payments, invoice requests and statements. The
ledger is read-only here; money moves only through the forms below, which call the billing
services and record who and why. Invoices are issued or rejected through their own forms."""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import Q, QuerySet
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from billing.choices import (
    DISPUTE_CLOSED,
    ApprovalStatus,
    InvoiceStatus,
    TopUpMethod,
    TopUpStatus,
)
from billing.holds import hold_lift
from billing.invoices import invoice_issue, invoice_reject, invoiced_over_paid_fen
from billing.models import (
    AccountHold,
    AdjustmentRequest,
    Dispute,
    InvoiceRequest,
    LedgerEntry,
    LedgerTransaction,
    Refund,
    Statement,
    StripeEvent,
    TopUp,
    Wallet,
)
from billing.payments import (
    STRIPE_EVENT_MAX_ATTEMPTS,
    adjustment_decide,
    adjustment_request,
    bank_transfer_request,
    refund_request,
    reversal_request,
    stripe_events_retry,
)
from starverse.core.adminurls import admin_change_url
from starverse.core.console import page_user
from starverse.core.errors import ServiceError
from starverse.core.money import MoneyParseError, format_fen, parse_fen

if TYPE_CHECKING:  # a development dependency: the stubs' name for text or lazy text
    from django_stubs_ext import StrOrPromise

_M = TypeVar("_M", bound=models.Model)
_P = TypeVar("_P", bound=models.Model)


class ReadOnlyAdmin(admin.ModelAdmin[_M]):
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def has_add_permission(self, request: HttpRequest, obj: _M | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: _M | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: _M | None = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline[_M, _P]):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: _P | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: _P | None = None) -> bool:
        return False


class YuanField(forms.CharField):
    """An amount typed in yuan ('100', '-25.50', '¥1,000'), cleaned to non-zero fen."""

    def clean(self, value: Any) -> int:
        text = super().clean(value)
        try:
            fen = parse_fen(text)
        except MoneyParseError as error:
            raise forms.ValidationError(str(error)) from None
        if fen == 0:
            raise forms.ValidationError(_("The amount must not be zero."))
        return fen


def _reason_field(label: "StrOrPromise | None" = None) -> forms.CharField:
    return forms.CharField(label=label or _("Reason"), widget=forms.Textarea(attrs={"rows": 3}))


class AdjustmentForm(forms.Form):
    amount = YuanField(
        label=_("Amount (¥)"), help_text=_("Positive credits cash, negative debits it. E.g. 100")
    )
    reason = _reason_field()


class BankTransferForm(forms.Form):
    amount = YuanField(label=_("Amount received (¥)"), help_text=_("E.g. 20000 or 20,000.00"))
    payer = forms.CharField(label=_("Payer (as on the bank statement)"), max_length=200)
    reference = forms.CharField(label=_("Bank reference"), max_length=100)
    reason = _reason_field(_("Note"))

    def clean_amount(self) -> int:
        amount: int = self.cleaned_data["amount"]
        if amount < 0:
            raise forms.ValidationError(_("A bank transfer is a positive amount."))
        return amount


class RefundForm(forms.Form):
    amount = YuanField(label=_("Amount to refund (¥)"))
    reason = _reason_field()


class ReasonForm(forms.Form):
    reason = _reason_field()


def _posted_message(txn: LedgerTransaction) -> str:
    after = txn.balance_after_fen
    return _("Posted %(amount)s as %(txn)s; balance %(before)s → %(after)s.") % {
        "amount": format_fen(txn.amount_fen, sign=True),
        "txn": txn.id,
        "before": format_fen(after - txn.amount_fen),
        "after": format_fen(after),
    }


def _form_page(
    request: HttpRequest, site: admin.AdminSite, title: str, form: forms.Form, obj: models.Model
) -> TemplateResponse:
    context = {
        **site.each_context(request),
        "title": title,
        "form": form,
        "object": obj,
        "opts": obj._meta,
    }
    return TemplateResponse(request, "admin/billing/money_form.html", context)


# The permission each operator money view (and approving its requests) needs. Superusers hold
# every permission; other staff need it granted (directly or through a group).
PERMS: dict[str, str] = {
    AdjustmentRequest.Kind.ADJUSTMENT: "billing.post_adjustment",
    AdjustmentRequest.Kind.BANK_TRANSFER: "billing.post_bank_transfer",
    AdjustmentRequest.Kind.REVERSAL: "billing.reverse_transaction",
}
REFUND_PERM = "billing.refund_topup"
LIFT_HOLD_PERM = "billing.lift_hold"


def _require_perm(request: HttpRequest, perm: str) -> None:
    if not request.user.has_perm(perm):
        raise PermissionDenied


def _pending_message(item: AdjustmentRequest) -> str:
    return _(
        "%(amount)s is above the approval threshold: request %(id)s waits for a second operator."
    ) % {"amount": format_fen(item.amount_fen, sign=True), "id": item.id}


def _back(name: str, pk: str) -> HttpResponseRedirect:
    return HttpResponseRedirect(admin_change_url(f"billing_{name}", pk))


class Outcome(NamedTuple):
    """What a money form's service call answers: a message at a level, and where to go."""

    level: int
    message: str
    back: HttpResponseRedirect


# A form's cleaned_data: each field's own type, hence Any.
Act = Callable[[dict[str, Any]], Outcome]


def _service_form(
    request: HttpRequest,
    site: admin.AdminSite,
    *,
    form_class: type[forms.Form],
    title: str,
    obj: models.Model,
    act: Act,
) -> HttpResponse:
    """The operator money forms: a valid POST calls the service through `act`, which answers
    (message level, message, where to go); a ServiceError is shown on the form."""
    form = form_class(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            level, message, back = act(form.cleaned_data)
        except ServiceError as error:
            form.add_error(None, error.message)
        else:
            messages.add_message(request, level, message)
            return back
    return _form_page(request, site, title, form, obj)


@admin.register(Wallet)
class WalletAdmin(ReadOnlyAdmin[Wallet]):
    list_display = ["id", "tenant", "cash", "promo", "arrears", "total", "created_at"]
    search_fields = ["id", "tenant__name", "tenant__members__email"]
    readonly_fields = [
        "id",
        "tenant",
        "cash",
        "promo",
        "arrears",
        "pending",
        "total",
        "created_at",
        "operations",
    ]
    exclude = ["cash_fen", "promo_fen", "arrears_fen", "pending_cash_fen", "pending_promo_fen"]

    @admin.display(description=_("Cash"))
    def cash(self, obj: Wallet) -> str:
        return format_fen(obj.cash_fen)

    @admin.display(description=_("Trial credit"))
    def promo(self, obj: Wallet) -> str:
        return format_fen(obj.promo_fen)

    @admin.display(description=_("Arrears"))
    def arrears(self, obj: Wallet) -> str:
        return format_fen(obj.arrears_fen)

    @admin.display(description=_("Accrued, not yet posted"))
    def pending(self, obj: Wallet) -> str:
        return format_fen(obj.pending_fen)

    @admin.display(description=_("Total"))
    def total(self, obj: Wallet) -> str:
        return format_fen(obj.total_fen)

    @admin.display(description=_("Operations"))
    def operations(self, obj: Wallet) -> str:
        return format_html(
            '<a class="button" href="{}">{}</a> <a class="button" href="{}">{}</a>',
            reverse("admin:billing_wallet_adjust", args=[obj.pk]),
            _("Post adjustment…"),
            reverse("admin:billing_wallet_bank_transfer", args=[obj.pk]),
            _("Post bank transfer…"),
        )

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("<str:pk>/adjust/", view(self.adjust_view), name="billing_wallet_adjust"),
            path(
                "<str:pk>/bank-transfer/",
                view(self.bank_transfer_view),
                name="billing_wallet_bank_transfer",
            ),
            *super().get_urls(),
        ]

    def adjust_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        _require_perm(request, PERMS[AdjustmentRequest.Kind.ADJUSTMENT])
        wallet = get_object_or_404(Wallet, pk=pk)

        def act(data: dict[str, Any]) -> Outcome:
            result = adjustment_request(
                wallet_id=wallet.id,
                actor=page_user(request),
                amount_fen=data["amount"],
                reason=data["reason"],
            )
            if isinstance(result, AdjustmentRequest):
                return Outcome(
                    messages.WARNING, _pending_message(result), _back("wallet", wallet.pk)
                )
            return Outcome(messages.SUCCESS, _posted_message(result), _back("wallet", wallet.pk))

        return _service_form(
            request,
            self.admin_site,
            form_class=AdjustmentForm,
            title=_("Post adjustment to %s") % wallet,
            obj=wallet,
            act=act,
        )

    def bank_transfer_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        _require_perm(request, PERMS[AdjustmentRequest.Kind.BANK_TRANSFER])
        wallet = get_object_or_404(Wallet, pk=pk)

        def act(data: dict[str, Any]) -> Outcome:
            topup = bank_transfer_request(
                wallet_id=wallet.id,
                actor=page_user(request),
                amount_fen=data["amount"],
                payer=data["payer"],
                reference=data["reference"],
                reason=data["reason"],
            )
            if isinstance(topup, AdjustmentRequest):
                return Outcome(
                    messages.WARNING, _pending_message(topup), _back("wallet", wallet.pk)
                )
            posted = topup.ledger_transaction
            assert posted is not None  # bank_transfer_post links it in the same transaction
            return Outcome(messages.SUCCESS, _posted_message(posted), _back("wallet", wallet.pk))

        return _service_form(
            request,
            self.admin_site,
            form_class=BankTransferForm,
            title=_("Post bank transfer to %s") % wallet,
            obj=wallet,
            act=act,
        )


class LedgerEntryInline(ReadOnlyInline[LedgerEntry, LedgerTransaction]):
    model = LedgerEntry
    fields = readonly_fields = ("account", "wallet", "amount_fen")


@admin.register(LedgerTransaction)
class LedgerTransactionAdmin(ReadOnlyAdmin[LedgerTransaction]):
    list_display = [
        "id",
        "created_at",
        "wallet",
        "kind",
        "amount",
        "balance_after",
        "created_by",
        "description",
    ]
    list_filter = ["kind", "created_at"]
    ordering = ["-created_at", "-id"]  # newest first (ids are random: no order of their own)
    search_fields = [
        "id",
        "idempotency_key",
        "wallet__id",
        "wallet__tenant__members__email",
        "instance_id",
    ]
    date_hierarchy = "created_at"
    inlines = [LedgerEntryInline]
    readonly_fields = [
        "id",
        "wallet",
        "kind",
        "idempotency_key",
        "amount_fen",
        "cash_delta_fen",
        "promo_delta_fen",
        "arrears_delta_fen",
        "cash_after_fen",
        "promo_after_fen",
        "arrears_after_fen",
        "invoiceable_delta_fen",
        "description",
        "reason",
        "created_by",
        "reverses",
        "instance_id",
        "created_at",
        "operations",
    ]
    exclude = ["request_hash"]

    @admin.display(description=_("Amount"))
    def amount(self, obj: LedgerTransaction) -> str:
        return format_fen(obj.amount_fen, sign=True)

    @admin.display(description=_("Balance after"))
    def balance_after(self, obj: LedgerTransaction) -> str:
        return format_fen(obj.balance_after_fen)

    @admin.display(description=_("Operations"))
    def operations(self, obj: LedgerTransaction) -> str:
        url = reverse("admin:billing_ledgertransaction_reverse", args=[obj.pk])
        return format_html('<a class="button" href="{}">{}</a>', url, _("Reverse…"))

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<str:pk>/reverse/",
                self.admin_site.admin_view(self.reverse_view),
                name="billing_ledgertransaction_reverse",
            ),
            *super().get_urls(),
        ]

    def reverse_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        _require_perm(request, PERMS[AdjustmentRequest.Kind.REVERSAL])
        txn = get_object_or_404(LedgerTransaction, pk=pk)

        def act(data: dict[str, Any]) -> Outcome:
            reversal = reversal_request(
                transaction_id=txn.id, actor=page_user(request), reason=data["reason"]
            )
            if isinstance(reversal, AdjustmentRequest):
                return Outcome(
                    messages.WARNING,
                    _pending_message(reversal),
                    _back("ledgertransaction", txn.pk),
                )
            return Outcome(
                messages.SUCCESS,
                _posted_message(reversal),
                _back("ledgertransaction", reversal.pk),
            )

        return _service_form(
            request,
            self.admin_site,
            form_class=ReasonForm,
            title=_("Reverse %s") % txn.id,
            obj=txn,
            act=act,
        )


class RefundInline(ReadOnlyInline[Refund, TopUp]):
    model = Refund
    fields = readonly_fields = (
        "id",
        "amount_fen",
        "status",
        "source",
        "stripe_refund_id",
        "requested_by",
        "reason",
        "error_message",
        "created_at",
        "settled_at",
    )


@admin.register(TopUp)
class TopUpAdmin(ReadOnlyAdmin[TopUp]):
    list_display = ["id", "created_at", "tenant", "method", "amount", "status", "paid_at"]
    list_filter = ["status", "method"]
    search_fields = [
        "id",
        "checkout_session_id",
        "payment_intent_id",
        "charge_id",
        "bank_reference",
        "tenant__members__email",
        "payer",
    ]
    readonly_fields = [
        "id",
        "tenant",
        "wallet",
        "created_by",
        "method",
        "amount_fen",
        "currency",
        "status",
        "checkout_session_id",
        "payment_intent_id",
        "charge_id",
        "bank_reference",
        "payer",
        "reason",
        "review_reason",
        "error_message",
        "ledger_transaction",
        "created_at",
        "expires_at",
        "paid_at",
        "operations",
    ]
    exclude = ["checkout_url"]
    inlines = [RefundInline]

    @admin.display(description=_("Amount"))
    def amount(self, obj: TopUp) -> str:
        return format_fen(obj.amount_fen)

    @admin.display(description=_("Operations"))
    def operations(self, obj: TopUp) -> str:
        if obj.method != TopUpMethod.STRIPE or obj.status != TopUpStatus.PAID:
            return "—"
        url = reverse("admin:billing_topup_refund", args=[obj.pk])
        return format_html('<a class="button" href="{}">{}</a>', url, _("Refund…"))

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<str:pk>/refund/",
                self.admin_site.admin_view(self.refund_view),
                name="billing_topup_refund",
            ),
            *super().get_urls(),
        ]

    def refund_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        _require_perm(request, REFUND_PERM)
        topup = get_object_or_404(TopUp, pk=pk)

        def act(data: dict[str, Any]) -> Outcome:
            refund = refund_request(
                topup_id=topup.id,
                actor=page_user(request),
                amount_fen=data["amount"],
                reason=data["reason"],
            )
            done = _("Refund %(id)s of %(amount)s: %(status)s.") % {
                "id": refund.id,
                "amount": format_fen(refund.amount_fen),
                "status": refund.get_status_display(),
            }
            over = invoiced_over_paid_fen(topup.tenant_id)
            if over > 0:
                # a 发票 was asked for money that has now gone back: the operator voids it
                done += " " + _(
                    "This account's invoice requests now exceed what it paid by %(over)s: "
                    "void (红冲) or reject an invoice for that amount."
                ) % {"over": format_fen(over)}
                return Outcome(messages.WARNING, done, _back("topup", topup.pk))
            return Outcome(messages.SUCCESS, done, _back("topup", topup.pk))

        return _service_form(
            request,
            self.admin_site,
            form_class=RefundForm,
            title=_("Refund %s") % topup.id,
            obj=topup,
            act=act,
        )


@admin.register(AdjustmentRequest)
class AdjustmentRequestAdmin(ReadOnlyAdmin[AdjustmentRequest]):
    list_display = [
        "id",
        "created_at",
        "kind",
        "wallet",
        "amount",
        "status",
        "requested_by",
        "decided_by",
    ]
    list_filter = ["status", "kind"]
    readonly_fields = [
        "id",
        "kind",
        "wallet",
        "payload",
        "amount_fen",
        "reason",
        "status",
        "requested_by",
        "decided_by",
        "decided_at",
        "ledger_transaction",
        "created_at",
    ]
    actions = ["approve", "reject"]

    @admin.display(description=_("Amount"))
    def amount(self, obj: AdjustmentRequest) -> str:
        return format_fen(obj.amount_fen, sign=True)

    def has_change_permission(
        self, request: HttpRequest, obj: AdjustmentRequest | None = None
    ) -> bool:
        # The list needs it to offer the actions; no object is ever editable.
        return obj is None and bool(request.user.is_staff)

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[AdjustmentRequest], approve: bool
    ) -> None:
        for item in queryset.filter(status=ApprovalStatus.PENDING):
            if not request.user.has_perm(PERMS[item.kind]):
                self.message_user(
                    request,
                    f"{item.id}: {_('you lack the permission this posting needs')}",
                    messages.ERROR,
                )
                continue
            try:
                adjustment_decide(request_id=item.id, approve=approve, actor=page_user(request))
            except ServiceError as error:
                self.message_user(request, f"{item.id}: {error.message}", messages.ERROR)
            else:
                self.message_user(
                    request, f"{item.id}: {_('approved') if approve else _('rejected')}"
                )

    @admin.action(description=_("Approve selected requests (posts them)"))
    def approve(self, request: HttpRequest, queryset: QuerySet[AdjustmentRequest]) -> None:
        self._decide(request, queryset, approve=True)

    @admin.action(description=_("Reject selected requests"))
    def reject(self, request: HttpRequest, queryset: QuerySet[AdjustmentRequest]) -> None:
        self._decide(request, queryset, approve=False)


class GaveUpFilter(admin.SimpleListFilter):
    title = _("gave up")
    parameter_name = "gave_up"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[StripeEvent]
    ) -> list[tuple[str, "StrOrPromise"]]:
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[StripeEvent]
    ) -> QuerySet[StripeEvent]:
        gave_up = Q(processed_at__isnull=True, attempts__gte=STRIPE_EVENT_MAX_ATTEMPTS)
        if self.value() == "yes":
            return queryset.filter(gave_up)
        if self.value() == "no":
            return queryset.exclude(gave_up)
        return queryset


@admin.register(StripeEvent)
class StripeEventAdmin(ReadOnlyAdmin[StripeEvent]):
    list_display = [
        "id",
        "type",
        "received_at",
        "processed_at",
        "attempts",
        "gave_up",
        "error",
    ]
    list_filter = [GaveUpFilter, "type"]
    actions = ["retry"]
    search_fields = ["id"]
    readonly_fields = [
        "id",
        "type",
        "livemode",
        "payload",
        "received_at",
        "processed_at",
        "attempts",
        "error",
    ]

    @admin.display(description=_("Gave up"), boolean=True)
    def gave_up(self, obj: StripeEvent) -> bool:
        return obj.processed_at is None and obj.attempts >= STRIPE_EVENT_MAX_ATTEMPTS

    def has_change_permission(self, request: HttpRequest, obj: StripeEvent | None = None) -> bool:
        # The list needs it to offer the retry action; no event is ever editable.
        return obj is None and bool(request.user.is_staff)

    @admin.action(description=_("Retry processing the selected events"))
    def retry(self, request: HttpRequest, queryset: QuerySet[StripeEvent]) -> None:
        ids = list(queryset.values_list("id", flat=True))
        try:
            queued = stripe_events_retry(event_ids=ids, actor=page_user(request))
        except ServiceError as error:
            self.message_user(request, error.message, messages.ERROR)
            return
        self.message_user(
            request, _("%(count)d unprocessed event(s) queued again.") % {"count": queued}
        )


def _link(name: str, pk: str | None, text: str | None = None) -> str:
    if pk is None:
        return "—"
    return format_html('<a href="{}">{}</a>', admin_change_url(name, pk), text or pk)


class OpenFilter(admin.SimpleListFilter):
    """Open or closed disputes (closed: won, lost, an inquiry closed)."""

    title = _("open")
    parameter_name = "open"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Dispute]
    ) -> list[tuple[str, "StrOrPromise"]]:
        return [("yes", _("Open")), ("no", _("Closed"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Dispute]) -> QuerySet[Dispute]:
        closed = Q(status__in=DISPUTE_CLOSED)
        if self.value() == "yes":
            return queryset.exclude(closed)
        if self.value() == "no":
            return queryset.filter(closed)
        return queryset


@admin.register(Dispute)
class DisputeAdmin(ReadOnlyAdmin[Dispute]):
    list_display = [
        "id",
        "created_at",
        "tenant_link",
        "topup_link",
        "amount",
        "status",
        "reason",
        "closed_at",
    ]
    list_filter = [OpenFilter, "status", "reason"]
    search_fields = ["id", "stripe_dispute_id", "topup__id", "topup__tenant__members__email"]
    list_select_related = ["topup"]
    readonly_fields = [
        "id",
        "stripe_dispute_id",
        "tenant_link",
        "topup_link",
        "amount",
        "currency",
        "status",
        "reason",
        "debit_link",
        "arrears_link",
        "credit_link",
        "holds_list",
        "last_event_id",
        "created_at",
        "closed_at",
    ]
    fields = tuple(readonly_fields)

    @admin.display(description=_("Account"))
    def tenant_link(self, obj: Dispute) -> str:
        return _link("accounts_tenant", obj.topup.tenant_id)

    @admin.display(description=_("Top-up"))
    def topup_link(self, obj: Dispute) -> str:
        return _link("billing_topup", obj.topup_id)

    @admin.display(description=_("Amount"))
    def amount(self, obj: Dispute) -> str:
        return format_fen(obj.amount_fen)

    @admin.display(description=_("Debit"))
    def debit_link(self, obj: Dispute) -> str:
        return _link("billing_ledgertransaction", obj.debit_transaction_id)

    @admin.display(description=_("Into arrears"))
    def arrears_link(self, obj: Dispute) -> str:
        return _link("billing_ledgertransaction", obj.arrears_transaction_id)

    @admin.display(description=_("Credited back"))
    def credit_link(self, obj: Dispute) -> str:
        return _link("billing_ledgertransaction", obj.credit_transaction_id)

    @admin.display(description=_("Holds"))
    def holds_list(self, obj: Dispute) -> str:
        links = [
            _link(
                "billing_accounthold",
                hold.pk,
                f"{hold.pk} ({_('lifted') if hold.lifted_at else _('open')})",
            )
            for hold in obj.holds.all()
        ]
        return format_html_join(", ", "{}", ((link,) for link in links)) if links else "—"


class LiftedFilter(admin.SimpleListFilter):
    title = _("lifted")
    parameter_name = "lifted"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[AccountHold]
    ) -> list[tuple[str, "StrOrPromise"]]:
        return [("no", _("Open")), ("yes", _("Lifted"))]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[AccountHold]
    ) -> QuerySet[AccountHold]:
        if self.value() == "no":
            return queryset.filter(lifted_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(lifted_at__isnull=False)
        return queryset


@admin.register(AccountHold)
class AccountHoldAdmin(ReadOnlyAdmin[AccountHold]):
    list_display = ["id", "created_at", "tenant_link", "reason", "lifted_at", "lifted_by"]
    list_filter = [LiftedFilter]
    search_fields = ["id", "key", "tenant__id", "tenant__members__email"]
    readonly_fields = [
        "id",
        "tenant_link",
        "key",
        "reason",
        "dispute_link",
        "refund",
        "created_at",
        "lifted_at",
        "lifted_by",
        "lift_reason",
        "operations",
    ]
    fields = tuple(readonly_fields)

    @admin.display(description=_("Account"))
    def tenant_link(self, obj: AccountHold) -> str:
        return _link("accounts_tenant", obj.tenant_id)

    @admin.display(description=_("Dispute"))
    def dispute_link(self, obj: AccountHold) -> str:
        return _link("billing_dispute", obj.dispute_id)

    @admin.display(description=_("Operations"))
    def operations(self, obj: AccountHold) -> str:
        if obj.lifted_at is not None:
            return "—"
        url = reverse("admin:billing_accounthold_lift", args=[obj.pk])
        return format_html('<a class="button" href="{}">{}</a>', url, _("Lift hold…"))

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<str:pk>/lift/",
                self.admin_site.admin_view(self.lift_view),
                name="billing_accounthold_lift",
            ),
            *super().get_urls(),
        ]

    def lift_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        _require_perm(request, LIFT_HOLD_PERM)
        hold = get_object_or_404(AccountHold, pk=pk)

        def act(data: dict[str, Any]) -> Outcome:
            lifted = hold_lift(hold_id=hold.id, reason=data["reason"], actor=page_user(request))
            return Outcome(
                messages.SUCCESS,
                _("Hold %(id)s lifted.") % {"id": lifted.id},
                _back("accounthold", hold.pk),
            )

        return _service_form(
            request,
            self.admin_site,
            form_class=ReasonForm,
            title=_("Lift hold %s") % hold.id,
            obj=hold,
            act=act,
        )


# --- invoices and statements -------------------------------------------------------------

ISSUE_PERM = "billing.issue_invoice"


class IssueForm(forms.Form):
    pdf = forms.FileField(label=_("Invoice PDF"), required=False)
    number = forms.CharField(label=_("Invoice number (发票号码)"), max_length=64, required=False)
    note = forms.CharField(
        label=_("Note"), required=False, widget=forms.Textarea(attrs={"rows": 2})
    )


class RejectForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason (sent to the user)"), widget=forms.Textarea(attrs={"rows": 3})
    )


@admin.register(InvoiceRequest)
class InvoiceRequestAdmin(ReadOnlyAdmin[InvoiceRequest]):
    list_display = ["id", "created_at", "tenant", "title", "amount", "status", "number"]
    list_filter = ["status", "created_at"]
    search_fields = ["id", "number", "tenant__members__email", "profile__title"]
    readonly_fields = [
        "id",
        "tenant",
        "requested_by",
        "amount",
        "status",
        "profile_table",
        "number",
        "pdf_link",
        "note",
        "decided_by",
        "created_at",
        "issued_at",
        "decided_at",
        "operations",
    ]
    fields = tuple(readonly_fields)

    @admin.display(description=_("Title"))
    def title(self, obj: InvoiceRequest) -> str:
        return str(obj.profile.get("title", ""))

    @admin.display(description=_("Amount"))
    def amount(self, obj: InvoiceRequest) -> str:
        return format_fen(obj.amount_fen)

    @admin.display(description=_("Invoice details"))
    def profile_table(self, obj: InvoiceRequest) -> str:
        rows = "".join(
            format_html("<tr><th>{}</th><td>{}</td></tr>", key, value)
            for key, value in obj.profile.items()
        )
        return format_html("<table>{}</table>", format_html(rows))

    @admin.display(description=_("PDF"))
    def pdf_link(self, obj: InvoiceRequest) -> str:
        if not obj.pdf:
            return "—"
        url = reverse("admin:billing_invoicerequest_pdf", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("Download"))

    @admin.display(description=_("Operations"))
    def operations(self, obj: InvoiceRequest) -> str:
        if obj.status != InvoiceStatus.REQUESTED:
            return "—"
        return format_html(
            '<a class="button" href="{}">{}</a> <a class="button" href="{}">{}</a>',
            reverse("admin:billing_invoicerequest_issue", args=[obj.pk]),
            _("Issue…"),
            reverse("admin:billing_invoicerequest_reject", args=[obj.pk]),
            _("Reject…"),
        )

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("<str:pk>/issue/", view(self.issue_view), name="billing_invoicerequest_issue"),
            path("<str:pk>/reject/", view(self.reject_view), name="billing_invoicerequest_reject"),
            path("<str:pk>/pdf/", view(self.pdf_view), name="billing_invoicerequest_pdf"),
            *super().get_urls(),
        ]

    def _form(
        self, request: HttpRequest, obj: InvoiceRequest, form: forms.Form, title: str
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "form": form,
            "object": f"{obj.id} · {obj.profile.get('title', '')} · {format_fen(obj.amount_fen)}",
            "opts": obj._meta,
        }
        return TemplateResponse(request, "admin/billing/invoice_form.html", context)

    def _done(self, request: HttpRequest, obj: InvoiceRequest) -> HttpResponseRedirect:
        obj.refresh_from_db()
        messages.success(
            request,
            _("Invoice request %(id)s: %(status)s; the user is e-mailed.")
            % {"id": obj.id, "status": obj.get_status_display()},
        )
        return HttpResponseRedirect(admin_change_url("billing_invoicerequest", obj.pk))

    def issue_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        _require_perm(request, ISSUE_PERM)
        obj = get_object_or_404(InvoiceRequest, pk=pk)
        form = IssueForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                invoice_issue(
                    invoice_id=obj.id,
                    actor=page_user(request),
                    number=form.cleaned_data["number"],
                    pdf=form.cleaned_data["pdf"],
                    note=form.cleaned_data["note"],
                )
            except ServiceError as error:
                form.add_error(None, error.message)
            else:
                return self._done(request, obj)
        return self._form(request, obj, form, str(_("Issue invoice %s")) % obj.id)

    def reject_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        _require_perm(request, ISSUE_PERM)
        obj = get_object_or_404(InvoiceRequest, pk=pk)
        form = RejectForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                invoice_reject(
                    invoice_id=obj.id, actor=page_user(request), reason=form.cleaned_data["reason"]
                )
            except ServiceError as error:
                form.add_error(None, error.message)
            else:
                return self._done(request, obj)
        return self._form(request, obj, form, str(_("Reject invoice request %s")) % obj.id)

    def pdf_view(self, request: HttpRequest, pk: str) -> FileResponse:
        if not self.has_view_permission(request):
            raise Http404
        obj = get_object_or_404(InvoiceRequest, pk=pk)
        if not obj.pdf:
            raise Http404
        return FileResponse(obj.pdf.open("rb"), as_attachment=True, filename=f"{obj.id}.pdf")


@admin.register(Statement)
class StatementAdmin(ReadOnlyAdmin[Statement]):
    list_display = ["id", "tenant", "month", "opening", "closing", "lines", "generated_at"]
    list_filter = ["month"]
    search_fields = ["id", "tenant__members__email"]
    exclude = ["pdf", "csv"]

    @admin.display(description=_("Opening"))
    def opening(self, obj: Statement) -> str:
        return format_fen(obj.opening_fen)

    @admin.display(description=_("Closing"))
    def closing(self, obj: Statement) -> str:
        return format_fen(obj.closing_fen)

    def get_readonly_fields(self, request: HttpRequest, obj: Statement | None = None) -> list[str]:
        return [f.name for f in Statement._meta.fields if f.name not in ("pdf", "csv")]
