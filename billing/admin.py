"""Operator screens for wallets and the ledger. The ledger is read-only here; money moves only
through the adjustment and reversal forms, which call billing.services and record who and why."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from billing.models import LedgerEntry, LedgerTransaction, Wallet
from billing.services import adjustment_post, transaction_reverse
from starverse.core.errors import ServiceError
from starverse.core.money import MoneyParseError, format_fen, parse_fen


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AdjustmentForm(forms.Form):
    amount = forms.CharField(
        label=_("Amount (¥)"),
        help_text=_("Positive credits cash, negative debits it. E.g. 100 or -25.50"),
    )
    reason = forms.CharField(label=_("Reason"), widget=forms.Textarea(attrs={"rows": 3}))

    def clean_amount(self) -> int:
        try:
            fen = parse_fen(self.cleaned_data["amount"])
        except MoneyParseError as error:
            raise forms.ValidationError(str(error)) from None
        if fen == 0:
            raise forms.ValidationError(_("The amount must not be zero."))
        return fen

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError(_("A reason is required."))
        return reason


class ReasonForm(forms.Form):
    reason = forms.CharField(label=_("Reason"), widget=forms.Textarea(attrs={"rows": 3}))


def _money_form_page(
    request: HttpRequest, admin_site: admin.AdminSite, *, title: str, form: forms.Form, obj: Any
) -> TemplateResponse:
    context = {
        **admin_site.each_context(request),
        "title": title,
        "form": form,
        "object": obj,
        "opts": obj._meta,
    }
    return TemplateResponse(request, "admin/billing/money_form.html", context)


@admin.register(Wallet)
class WalletAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "cash", "promo", "total", "created_at"]
    search_fields = ["id", "tenant__name", "tenant__members__email"]
    readonly_fields = ["id", "tenant", "cash", "promo", "total", "created_at", "adjust_link"]
    exclude = ["cash_fen", "promo_fen"]

    @admin.display(description=_("Cash"))
    def cash(self, obj: Wallet) -> str:
        return format_fen(obj.cash_fen)

    @admin.display(description=_("Trial credit"))
    def promo(self, obj: Wallet) -> str:
        return format_fen(obj.promo_fen)

    @admin.display(description=_("Total"))
    def total(self, obj: Wallet) -> str:
        return format_fen(obj.total_fen)

    @admin.display(description=_("Operations"))
    def adjust_link(self, obj: Wallet) -> str:
        url = reverse("admin:billing_wallet_adjust", args=[obj.pk])
        return format_html('<a class="button" href="{}">{}</a>', url, _("Post adjustment…"))

    def get_urls(self) -> list:
        return [
            path(
                "<str:pk>/adjust/",
                self.admin_site.admin_view(self.adjust_view),
                name="billing_wallet_adjust",
            ),
            *super().get_urls(),
        ]

    def adjust_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        wallet = get_object_or_404(Wallet, pk=pk)
        if not request.user.has_perm("billing.view_wallet"):
            return HttpResponseRedirect(reverse("admin:index"))
        form = AdjustmentForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                txn = adjustment_post(
                    wallet_id=wallet.id,
                    amount_fen=form.cleaned_data["amount"],
                    reason=form.cleaned_data["reason"],
                    actor=request.user,
                )
            except ServiceError as error:
                form.add_error(None, error.message)
            else:
                messages.success(
                    request,
                    _("Posted %(amount)s as %(txn)s; balance now %(total)s.")
                    % {
                        "amount": format_fen(txn.amount_fen, sign=True),
                        "txn": txn.id,
                        "total": format_fen(txn.cash_after_fen + txn.promo_after_fen),
                    },
                )
                return HttpResponseRedirect(
                    reverse("admin:billing_wallet_change", args=[wallet.pk])
                )
        return _money_form_page(
            request,
            self.admin_site,
            title=_("Post adjustment to %s") % wallet,
            form=form,
            obj=wallet,
        )


class LedgerEntryInline(admin.TabularInline):
    model = LedgerEntry
    fields = ["account", "wallet", "amount_fen"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(LedgerTransaction)
class LedgerTransactionAdmin(ReadOnlyAdmin):
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
        "cash_after_fen",
        "promo_after_fen",
        "description",
        "reason",
        "created_by",
        "reverses",
        "instance_id",
        "created_at",
        "reverse_link",
    ]
    exclude = ["request_hash"]

    @admin.display(description=_("Amount"))
    def amount(self, obj: LedgerTransaction) -> str:
        return format_fen(obj.amount_fen, sign=True)

    @admin.display(description=_("Balance after"))
    def balance_after(self, obj: LedgerTransaction) -> str:
        return format_fen(obj.cash_after_fen + obj.promo_after_fen)

    @admin.display(description=_("Operations"))
    def reverse_link(self, obj: LedgerTransaction) -> str:
        url = reverse("admin:billing_ledgertransaction_reverse", args=[obj.pk])
        return format_html('<a class="button" href="{}">{}</a>', url, _("Reverse…"))

    def get_urls(self) -> list:
        return [
            path(
                "<str:pk>/reverse/",
                self.admin_site.admin_view(self.reverse_view),
                name="billing_ledgertransaction_reverse",
            ),
            *super().get_urls(),
        ]

    def reverse_view(self, request: HttpRequest, pk: str) -> HttpResponse:
        txn = get_object_or_404(LedgerTransaction, pk=pk)
        form = ReasonForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                reversal = transaction_reverse(
                    transaction_id=txn.id, reason=form.cleaned_data["reason"], actor=request.user
                )
            except ServiceError as error:
                form.add_error(None, error.message)
            else:
                messages.success(request, _("Reversed by %(id)s.") % {"id": reversal.id})
                return HttpResponseRedirect(
                    reverse("admin:billing_ledgertransaction_change", args=[reversal.pk])
                )
        return _money_form_page(
            request, self.admin_site, title=_("Reverse %s") % txn.id, form=form, obj=txn
        )
