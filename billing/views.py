"""Console pages for money: balance and ledger, top-ups, invoices (发票), monthly statements
and usage. (The public cost calculator prices catalog offerings, so its page is the catalog's:
instances.views.calculator.)"""

import uuid
from datetime import date, datetime
from typing import IO, Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_POST

from billing.choices import InvoiceKind, TopUpStatus
from billing.holds import tenant_on_hold
from billing.invoices import (
    PROFILE_FIELDS,
    invoice_profile_for,
    invoice_profile_save,
    invoice_request,
    invoiceable_fen,
)
from billing.models import InvoiceProfile, InvoiceRequest, Statement, TopUp
from billing.payments import (
    topup_cancel,
    topup_create,
    topup_refresh,
    topup_resumable,
)
from billing.selectors import ledger_lines_for_tenant, wallet_for_tenant
from billing.statements import (
    STATEMENT_FORMATS,
    current_month,
    month_start,
    next_month,
    parse_month,
    statement_content,
    stored_file,
)
from billing.usage import GROUPINGS, MAX_RANGE_DAYS, UsageReport, usage_csv, usage_report
from starverse.accounts.audit import audit_request
from starverse.core.console import page_user
from starverse.core.dates import validate_day
from starverse.core.errors import FieldInvalid, NotFound, ServiceError
from starverse.core.money import MoneyParseError, format_fen, parse_fen
from starverse.core.roles import PAYERS, require_payer, require_role, role_of
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


class InvoiceProfileForm(forms.Form):
    """The invoice details (发票信息); billing.invoices checks them (the tax number's check
    character, what a special invoice needs) and its refusal is shown at the field it names."""

    kind = forms.ChoiceField(
        label=gettext_lazy("Invoice kind"), choices=InvoiceKind.choices, initial="general"
    )
    title = forms.CharField(label=gettext_lazy("Invoice title (发票抬头)"), max_length=200)
    tax_number = forms.CharField(
        label=gettext_lazy("Tax number (统一社会信用代码)"), max_length=32, required=False
    )
    address = forms.CharField(
        label=gettext_lazy("Registered address"), max_length=300, required=False
    )
    phone = forms.CharField(label=gettext_lazy("Phone number"), max_length=64, required=False)
    bank = forms.CharField(label=gettext_lazy("Bank"), max_length=200, required=False)
    bank_account = forms.CharField(
        label=gettext_lazy("Bank account"), max_length=64, required=False
    )
    email = forms.EmailField(label=gettext_lazy("E-mail for the invoice"), max_length=254)


class InvoiceRequestForm(forms.Form):
    amount = forms.CharField(label=gettext_lazy("Amount (¥)"), max_length=20)
    # one key per rendered form: a second submission of the same form is the same request
    key = forms.CharField(widget=forms.HiddenInput, max_length=200)

    def clean_amount(self) -> int:
        try:
            amount = parse_fen(self.cleaned_data["amount"])
        except MoneyParseError:
            raise forms.ValidationError(
                _("Enter an amount in yuan, such as 100 or 100.50.")
            ) from None
        if amount <= 0:
            raise forms.ValidationError(_("The amount must be more than zero."))
        return amount


class UsageForm(forms.Form):
    """The usage table's range and grouping, read from the page's query string."""

    start = forms.DateField(
        label=gettext_lazy("From"),
        input_formats=["%Y-%m-%d"],
        validators=[validate_day],
        widget=forms.DateInput(format="%Y-%m-%d", attrs={"type": "date"}),
    )
    end = forms.DateField(
        label=gettext_lazy("To"),
        input_formats=["%Y-%m-%d"],
        validators=[validate_day],
        widget=forms.DateInput(format="%Y-%m-%d", attrs={"type": "date"}),
    )
    group_by = forms.ChoiceField(
        label=gettext_lazy("Group by"),
        choices=[
            ("instance", gettext_lazy("Instance")),
            ("day", gettext_lazy("Day")),
            ("member", gettext_lazy("Member")),
        ],
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and end:
            if start > end:
                self.add_error("end", _("The last day comes before the first."))
            elif (end - start).days + 1 > MAX_RANGE_DAYS:
                self.add_error(
                    "end", _("At most %(days)d days at once.") % {"days": MAX_RANGE_DAYS}
                )
        return data


def _usage_form(request: HttpRequest) -> UsageForm:
    today = timezone.localdate()
    defaults = {"start": today.replace(day=1), "end": today, "group_by": GROUPINGS[0]}
    if not any(name in request.GET for name in defaults):
        form = UsageForm(defaults)
    else:
        form = UsageForm({name: request.GET.get(name, "") for name in defaults})
    form.is_valid()
    return form


def _usage(request: HttpRequest, form: UsageForm) -> UsageReport | None:
    if form.errors:
        return None
    return usage_report(
        tenant_id=request.user.tenant_id,  # type: ignore[union-attr]
        start=form.cleaned_data["start"],
        end=form.cleaned_data["end"],
        group_by=form.cleaned_data["group_by"],
    )


def _usage_query(form: UsageForm) -> str:
    """The query string of the usage CSV link: the table's own range and grouping."""
    if form.errors:
        return ""
    data = form.cleaned_data
    return urlencode({name: str(data[name]) for name in ("start", "end", "group_by")})


def closed_months(opened: datetime) -> list[date]:
    """The months a statement can be had for: from the account's first month (its wallet's
    opening, `opened`) to last month, newest first."""
    month, last = month_start(timezone.localdate(opened)), current_month()
    months = []
    while month < last:
        months.append(month)
        month = next_month(month)
    return months[::-1]


def _profile_form(profile: InvoiceProfile | None) -> InvoiceProfileForm:
    initial = {name: getattr(profile, name) for name in PROFILE_FIELDS} if profile else None
    return InvoiceProfileForm(initial=initial)


def _billing_page(
    request: HttpRequest,
    *,
    profile_form: InvoiceProfileForm | None = None,
    invoice_form: InvoiceRequestForm | None = None,
    status: int = 200,
) -> HttpResponse:
    tenant_id = request.user.tenant_id  # type: ignore[union-attr]
    page = Paginator(ledger_lines_for_tenant(tenant_id), 25).get_page(request.GET.get("page"))
    topups = scope_to_user(TopUp.objects.all(), request.user, "tenant")[:10]
    usage_form = _usage_form(request)
    made = dict(Statement.objects.filter(tenant_id=tenant_id).values_list("month", "closing_fen"))
    wallet = wallet_for_tenant(tenant_id)
    profile = invoice_profile_for(tenant_id)
    return render(
        request,
        "billing/billing.html",
        {
            "wallet": wallet,
            "on_hold": tenant_on_hold(tenant_id),
            "page": page,
            "topups": topups,
            "resumable": {item.id for item in topups if topup_resumable(item)},
            "presets": settings.TOPUP_PRESETS_FEN,
            "form": TopUpForm(initial={"amount": "100"}),
            "limits": (settings.TOPUP_MIN_FEN, settings.TOPUP_MAX_FEN),
            "stripe_demo": settings.STRIPE_DEMO,
            "can_invoice": role_of(request.user) in PAYERS,
            "has_profile": profile is not None,
            "profile_form": profile_form or _profile_form(profile),
            "invoice_form": invoice_form or InvoiceRequestForm(initial={"key": uuid.uuid4().hex}),
            "invoiceable_fen": invoiceable_fen(tenant_id),
            "invoices": scope_to_user(InvoiceRequest.objects.all(), request.user, "tenant")[:20],
            "this_month": current_month(),
            "months": [(month, made.get(month)) for month in closed_months(wallet.created_at)],
            "usage_form": usage_form,
            "usage": _usage(request, usage_form),
            "usage_query": _usage_query(usage_form),
            "active": "billing",
        },
        status=status,
    )


@login_required
def billing(request: HttpRequest) -> HttpResponse:
    if request.GET.get("cancelled"):
        messages.info(request, _("Payment cancelled: nothing was charged."))
    return _billing_page(request)


def _billing_at(anchor: str) -> HttpResponse:
    return redirect(reverse("billing:billing") + f"#{anchor}")


@login_required
@require_POST
def invoice_profile(request: HttpRequest) -> HttpResponse:
    """Save the invoice details; a refusal names its field and is shown next to it."""
    form = InvoiceProfileForm(request.POST)
    if form.is_valid():
        try:
            require_role(request.user, PAYERS, _("changing the invoice details"))
            invoice_profile_save(
                tenant_id=request.user.tenant_id,  # type: ignore[union-attr]
                data=form.cleaned_data,
            )
        except FieldInvalid as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        except ServiceError as error:
            messages.error(request, error.message)
            return _billing_at("invoices")
        else:
            messages.success(request, _("Invoice details saved."))
            return _billing_at("invoices")
    return _billing_page(request, profile_form=form, status=400)


@login_required
@require_POST
def invoice_create(request: HttpRequest) -> HttpResponse:
    """Ask for an invoice over an amount of paid cash; above what can be invoiced, the
    service's message is shown at the amount."""
    form = InvoiceRequestForm(request.POST)
    if form.is_valid():
        try:
            require_role(request.user, PAYERS, _("requesting an invoice"))
            item, created = invoice_request(
                user=page_user(request),
                amount_fen=form.cleaned_data["amount"],
                idempotency_key=f"console:{form.cleaned_data['key']}",
            )
        except FieldInvalid as error:
            form.add_error("amount", error.message)
        except ServiceError as error:
            messages.error(request, error.message)
            return _billing_at("invoices")
        else:
            if created:
                messages.success(
                    request,
                    _("Invoice of %(amount)s requested. We e-mail you when it is issued.")
                    % {"amount": format_fen(item.amount_fen)},
                )
            else:
                messages.info(request, _("This invoice was already requested."))
            return _billing_at("invoices")
    return _billing_page(request, invoice_form=form, status=400)


def _attachment(content: IO[bytes] | None, filename: str, content_type: str) -> FileResponse:
    """A file as an attachment: a stored one read through the storage (media is never
    public), or one drawn for this answer."""
    if content is None:
        raise Http404
    return FileResponse(content, as_attachment=True, filename=filename, content_type=content_type)


@login_required
@require_GET
def invoice_pdf(request: HttpRequest, pk: str) -> FileResponse:
    """An issued invoice's PDF; another account's invoice, or one without a PDF, is a 404."""
    item = get_for_user(InvoiceRequest.objects.all(), request.user, "tenant", pk)
    return _attachment(
        stored_file(item.pdf), f"invoice-{item.number or item.id}.pdf", "application/pdf"
    )


@login_required
@require_GET
def statement_file(request: HttpRequest, month: str, fmt: str) -> HttpResponseBase:
    """A month's statement as PDF or CSV as the API has it: a closed month's made on first
    request, the current month's so far drawn now."""
    if fmt not in STATEMENT_FORMATS:
        raise Http404
    try:
        when = parse_month(month)
        content = statement_content(
            tenant_id=request.user.tenant_id,  # type: ignore[union-attr]
            month=when,
            fmt=fmt,
        )
    except NotFound:
        raise Http404 from None
    except ServiceError as error:
        messages.error(request, error.message)
        return _billing_at("statements")
    return _attachment(content, f"statement-{when:%Y-%m}.{fmt}", STATEMENT_FORMATS[fmt])


@login_required
@require_GET
def usage_download(request: HttpRequest) -> HttpResponse:
    """The usage table of the Billing page as CSV (the same range and grouping)."""
    form = _usage_form(request)
    report = _usage(request, form)
    if report is None:
        messages.error(request, " ".join(str(e) for errors in form.errors.values() for e in errors))
        return _billing_at("usage")
    response = HttpResponse(usage_csv(report), content_type="text/csv; charset=utf-8")
    name = f"usage-{report.start:%Y%m%d}-{report.end:%Y%m%d}-{report.group_by}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@login_required
@require_POST
def topup(request: HttpRequest) -> HttpResponse:
    form = TopUpForm(request.POST)
    if form.is_valid():
        try:
            require_payer(request.user)
            created = topup_create(user=page_user(request), amount_fen=form.cleaned_data["amount"])
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


@login_required
@require_GET
def topup_resume(request: HttpRequest, pk: str) -> HttpResponse:
    """Back to the same Stripe Checkout page of a top-up awaiting payment, while its session is
    open; otherwise Billing says what became of it."""
    item = topup_refresh(topup=get_for_user(TopUp.objects.all(), request.user, "tenant", pk))
    if topup_resumable(item):
        return redirect(item.checkout_url)
    messages.info(
        request,
        _("Top-up of %(amount)s: %(status)s.")
        % {"amount": format_fen(item.amount_fen), "status": item.get_status_display()},
    )
    return redirect("billing:billing")


@login_required
@require_POST
def topup_cancel_view(request: HttpRequest, pk: str) -> HttpResponse:
    """Cancel a top-up awaiting payment: its Stripe Checkout page is closed first."""
    item = get_for_user(TopUp.objects.all(), request.user, "tenant", pk)
    try:
        require_payer(request.user)
        topup_cancel(topup=item, actor=page_user(request))
    except ServiceError as error:
        messages.error(request, error.message)
    else:
        messages.success(
            request,
            _("Top-up of %(amount)s cancelled: nothing was charged.")
            % {"amount": format_fen(item.amount_fen)},
        )
    return _billing_at("top-up")
