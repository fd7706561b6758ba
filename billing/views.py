"""Console pages for money: balance and ledger, top-ups, and the public cost calculator."""

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from billing.calculator import PRESETS
from billing.choices import TopUpStatus
from billing.holds import tenant_on_hold
from billing.models import TopUp
from billing.payments import topup_create, topup_refresh
from billing.selectors import ledger_for_tenant, wallet_for_tenant
from starverse.accounts.audit import audit_request
from starverse.core.errors import ServiceError
from starverse.core.money import MoneyParseError, format_fen, parse_fen
from starverse.core.roles import require_payer
from starverse.core.tenancy import get_for_user, scope_to_user


class TopUpForm(forms.Form):
    amount = forms.CharField(label=gettext_lazy("Amount (¥)"), max_length=20)

    def clean_amount(self) -> int:
        try:
            return parse_fen(self.cleaned_data["amount"])
        except MoneyParseError:
            raise forms.ValidationError(
                _("Enter an amount in yuan, such as 100 or 100.50.")
            ) from None


@login_required
def billing(request: HttpRequest) -> HttpResponse:
    tenant_id = request.user.tenant_id  # type: ignore[union-attr]
    page = Paginator(ledger_for_tenant(tenant_id), 25).get_page(request.GET.get("page"))
    topups = scope_to_user(TopUp.objects.all(), request.user, "tenant")[:10]
    if request.GET.get("cancelled"):
        messages.info(request, _("Payment cancelled: nothing was charged."))
    return render(
        request,
        "billing/billing.html",
        {
            "wallet": wallet_for_tenant(tenant_id),
            "on_hold": tenant_on_hold(tenant_id),
            "page": page,
            "topups": topups,
            "presets": settings.TOPUP_PRESETS_FEN,
            "form": TopUpForm(initial={"amount": "100"}),
            "limits": (settings.TOPUP_MIN_FEN, settings.TOPUP_MAX_FEN),
            "stripe_demo": settings.STRIPE_DEMO,
            "active": "billing",
        },
    )


@login_required
@require_POST
def topup(request: HttpRequest) -> HttpResponse:
    form = TopUpForm(request.POST)
    if form.is_valid():
        try:
            require_payer(request.user)
            created = topup_create(user=request.user, amount_fen=form.cleaned_data["amount"])
            audit_request(request, "topup.created", created, amount_fen=created.amount_fen)
        except ServiceError as error:
            messages.error(request, error.message)
        else:
            return redirect(created.checkout_url)
    else:
        messages.error(request, " ".join(map(str, form.errors["amount"])))
    return redirect("billing:billing")


@login_required
def topup_return(request: HttpRequest, pk: str) -> HttpResponse:
    """Stripe's success page lands here; it settles the top-up the same way the webhook does."""
    item = topup_refresh(topup=get_for_user(TopUp.objects.all(), request.user, "tenant", pk))
    amount = format_fen(item.amount_fen)
    if item.status == TopUpStatus.PAID:
        messages.success(
            request, _("Top-up of %(amount)s received. Thank you!") % {"amount": amount}
        )
    elif item.status == TopUpStatus.PROCESSING:
        messages.info(
            request,
            _("Your payment of %(amount)s is processing; the balance updates when it clears.")
            % {"amount": amount},
        )
    else:
        messages.info(
            request,
            _("Top-up of %(amount)s: %(status)s.")
            % {"amount": amount, "status": item.get_status_display()},
        )
    return redirect("billing:billing")


def calculator(request: HttpRequest) -> HttpResponse:
    """Public: open to anyone, signed in or not."""
    return render(
        request,
        "billing/calculator.html",
        {
            "presets": PRESETS,
            "active": "calculator",
        },
    )
