"""The console's Billing page: invoice details and requests (发票), monthly statements and
usage, through the same services as the API, with the team's payer rule and tenancy."""

import re
from datetime import datetime
from html import unescape
from zoneinfo import ZoneInfo

import pytest
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from billing.choices import TransactionKind
from billing.invoices import invoice_issue, invoice_profile_save
from billing.models import InvoiceProfile, InvoiceRequest, LedgerTransaction, Statement, Wallet
from billing.onboarding import team_create
from billing.services import Accrual, ledger_post, usage_accrue_many
from starverse.accounts.teams import invitation_accept, invitation_create, invitation_token
from tests.factories import (
    _invoice_request,
    fund,
    make_instance,
    make_operator,
    make_token,
    make_user,
)

TZ = ZoneInfo("Asia/Shanghai")
TAX = "91350100M000100Y43"
DETAILS = {"kind": "general", "title": "清华大学", "tax_number": TAX, "email": "f@tsinghua.cn"}
PDF = b"%PDF-1.4\n% an issued invoice\n"


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)


@pytest.fixture
def signed_in(db, client):
    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


@pytest.fixture
def clock(monkeypatch):
    """timezone.now, and the creation times of ledger lines and wallets, at a set moment."""
    now = {"at": datetime.now(TZ)}
    monkeypatch.setattr(timezone, "now", lambda: now["at"])
    for model in (LedgerTransaction, Wallet):
        monkeypatch.setattr(model._meta.get_field("created_at"), "_get_default", lambda: now["at"])
    return now


def _team_with(role):
    owner, person = make_user(), make_user()
    team = team_create(user=owner, name="NLP lab")
    invitation = invitation_create(actor=owner, team=team, email=person.email, role=role)
    invitation_accept(user=person, token=invitation_token(invitation))
    return team, owner, person


def _acting_for(client, user, team):
    client.force_login(user)
    assert client.post("/teams/switch/", {"team": team.pk}).status_code == 302
    return client


def _issued(user):
    item = _invoice_request(user)
    return invoice_issue(
        invoice_id=item.id, actor=make_operator(), number="0123", pdf=ContentFile(PDF, "i.pdf")
    )


def test_billing_page_shows_the_usage_invoice_and_statement_sections(signed_in):
    user = make_user()
    page = signed_in(user).get("/billing/")
    assert page.status_code == 200
    html = page.content.decode()
    for anchor in ('id="usage"', 'id="invoices"', 'id="invoice-requests"', 'id="statements"'):
        assert anchor in html
    assert 'action="/billing/invoice-profile/"' in html
    # no details yet: nothing to request an invoice to
    assert 'action="/billing/invoices/"' not in html
    assert "Save your invoice details first" in html
    # the account opened this month: only the month so far
    assert re.findall(r'href="/billing/statements/(\d{4}-\d\d)/pdf/"', html) == [
        f"{timezone.localdate():%Y-%m}"
    ]
    assert "Download CSV" in html and "/billing/usage.csv?" in html


def test_the_transactions_show_the_gpu_time_not_yet_posted_on_top(signed_in):
    user = make_user()
    fund(user, 1_000)
    wallet = Wallet.objects.get(tenant=user.tenant)
    html = signed_in(user).get("/billing/").content.decode()
    assert "data-pending" not in html  # nothing accrued: no such line
    with transaction.atomic():
        usage_accrue_many([Accrual(wallet.id, 37, None), Accrual(wallet.id, 37, None)])

    html = signed_in(user).get("/billing/").content.decode()

    row = html[html.index("<tr data-pending>") : html.index("</tr>", html.index("data-pending"))]
    assert "GPU time used since the last hourly posting" in row
    assert "¥0.74" in row and "¥19.26" in row  # what it held, and what is free after it
    assert "¥0.74 of GPU time used since the last hourly posting is already taken off" in html


def test_saving_the_invoice_details_then_they_fill_the_form(signed_in):
    user = make_user()
    client = signed_in(user)
    saved = client.post("/billing/invoice-profile/", DETAILS)
    assert (saved.status_code, saved["Location"]) == (302, "/billing/#invoices")
    profile = InvoiceProfile.objects.get(tenant_id=user.tenant_id)
    assert (profile.title, profile.tax_number, profile.kind) == ("清华大学", TAX, "general")
    html = client.get("/billing/").content.decode()
    assert "Invoice details saved." in html
    assert f'value="{TAX}"' in html
    assert 'action="/billing/invoices/"' in html


def _first(pattern, text):
    found = re.search(pattern, text, re.S)
    assert found is not None, pattern
    return found[1]


def _field_error(html, name):
    """The error shown in the field whose input is `name`, or None."""
    for block in re.findall(
        r'<div class="field has-error">(.*?)</div>\s*(?=<div class="field|<button)', html, re.S
    ):
        if f'name="{name}"' in block:
            return unescape(_first(r'<p class="field-error">(.*?)</p>', block))
    return None


def test_a_bad_tax_number_and_a_special_invoice_without_its_fields_are_shown_at_the_field(
    signed_in,
):
    user = make_user()
    client = signed_in(user)
    refused = client.post(
        "/billing/invoice-profile/", {**DETAILS, "tax_number": "91350100M000100Y42"}
    )
    assert refused.status_code == 400
    html = refused.content.decode()
    assert "not a valid unified social credit code" in _field_error(html, "tax_number")
    assert _field_error(html, "title") is None
    assert 'value="清华大学"' in html  # what was typed stays
    refused = client.post("/billing/invoice-profile/", {**DETAILS, "kind": "special"})
    assert refused.status_code == 400
    assert "needs the registered address" in _field_error(refused.content.decode(), "address")
    refused = client.post("/billing/invoice-profile/", {**DETAILS, "title": ""})
    assert _field_error(refused.content.decode(), "title")
    assert not InvoiceProfile.objects.exists()


def test_requesting_an_invoice_once_per_form_and_never_above_what_was_paid(signed_in):
    user = make_user()
    fund(user, 50_000)
    invoice_profile_save(tenant_id=user.tenant_id, data=DETAILS)
    client = signed_in(user)
    assert "¥500.00" in client.get("/billing/").content.decode()  # can be invoiced

    made = client.post("/billing/invoices/", {"amount": "300", "key": "k1"})
    assert (made.status_code, made["Location"]) == (302, "/billing/#invoices")
    again = client.post("/billing/invoices/", {"amount": "300", "key": "k1"}, follow=True)
    assert "already requested" in again.content.decode()
    item = InvoiceRequest.objects.get(tenant_id=user.tenant_id)
    assert (item.amount_fen, item.status, item.profile["title"]) == (
        30_000,
        "requested",
        "清华大学",
    )

    over = client.post("/billing/invoices/", {"amount": "200.01", "key": "k2"})
    assert over.status_code == 400
    assert "more than can be invoiced: ¥200.00" in _field_error(over.content.decode(), "amount")
    for bad in ("abc", "0"):
        refused = client.post("/billing/invoices/", {"amount": bad, "key": "k3"})
        assert refused.status_code == 400 and _field_error(refused.content.decode(), "amount")
    assert InvoiceRequest.objects.count() == 1

    html = client.get("/billing/").content.decode()
    assert "¥300.00" in html and "Requested" in html and "¥200.00" in html


def test_a_plain_team_member_reads_but_gets_no_forms_and_is_refused(db, client):
    team, _owner, member = _team_with("member")
    invoice_profile_save(tenant_id=team.pk, data=DETAILS)
    _acting_for(client, member, team)
    html = client.get("/billing/").content.decode()
    assert 'action="/billing/invoice-profile/"' not in html
    assert 'action="/billing/invoices/"' not in html
    assert "清华大学" in html  # the details, read-only
    assert "Only owners, admins and billing members" in html

    answer = client.post("/billing/invoice-profile/", {**DETAILS, "title": "Other"}, follow=True)
    assert "does not allow changing the invoice details" in answer.content.decode()
    assert InvoiceProfile.objects.get(tenant_id=team.pk).title == "清华大学"
    answer = client.post("/billing/invoices/", {"amount": "1", "key": "k"}, follow=True)
    assert "does not allow requesting an invoice" in answer.content.decode()
    assert not InvoiceRequest.objects.exists()


def test_a_billing_member_saves_the_teams_details(db, client):
    team, _owner, payer = _team_with("billing")
    _acting_for(client, payer, team)
    assert 'action="/billing/invoice-profile/"' in client.get("/billing/").content.decode()
    assert client.post("/billing/invoice-profile/", DETAILS).status_code == 302
    assert InvoiceProfile.objects.get(tenant_id=team.pk).title == "清华大学"


def test_the_issued_pdf_downloads_for_its_account_only(signed_in):
    user = make_user()
    item = _issued(user)
    client = signed_in(user)
    html = client.get("/billing/").content.decode()
    assert f'href="/billing/invoices/{item.id}/pdf/"' in html and "0123" in html
    answer = client.get(f"/billing/invoices/{item.id}/pdf/")
    assert answer.status_code == 200 and answer["Content-Type"] == "application/pdf"
    assert b"".join(answer.streaming_content) == PDF
    assert "invoice-0123.pdf" in answer["Content-Disposition"]

    stranger = signed_in(make_user())
    assert stranger.get(f"/billing/invoices/{item.id}/pdf/").status_code == 404
    assert item.id not in stranger.get("/billing/").content.decode()


def test_a_requested_invoice_has_no_pdf_yet(signed_in):
    user = make_user()
    item = _invoice_request(user)
    client = signed_in(user)
    assert f"/billing/invoices/{item.id}/pdf/" not in client.get("/billing/").content.decode()
    assert client.get(f"/billing/invoices/{item.id}/pdf/").status_code == 404


def test_statements_download_as_pdf_and_csv_closed_months_and_this_one_so_far(signed_in, clock):
    clock["at"] = datetime(2026, 9, 20, 12, 0, tzinfo=TZ)
    user = make_user()
    fund(user, 5_000)
    clock["at"] = datetime(2026, 12, 3, 9, 0, tzinfo=TZ)
    client = signed_in(user)
    html = client.get("/billing/").content.decode()
    months = re.findall(r'href="/billing/statements/(\d{4}-\d\d)/pdf/"', html)
    # newest first, from the account's month; this month so far on top
    assert months == ["2026-12", "2026-11", "2026-10", "2026-09"]

    pdf = client.get("/billing/statements/2026-10/pdf/")
    assert (pdf.status_code, pdf["Content-Type"]) == (200, "application/pdf")
    assert b"".join(pdf.streaming_content).startswith(b"%PDF-")
    assert "statement-2026-10.pdf" in pdf["Content-Disposition"]
    sheet = client.get("/billing/statements/2026-10/csv/")
    assert (sheet.status_code, sheet["Content-Type"]) == (200, "text/csv; charset=utf-8")
    assert b"".join(sheet.streaming_content).startswith("\ufeff".encode())
    assert Statement.objects.filter(tenant_id=user.tenant_id).count() == 1  # made once
    assert "¥60.00" in client.get("/billing/").content.decode()  # its closing balance

    assert client.get("/billing/statements/2026-08/pdf/").status_code == 404  # before the account
    assert client.get("/billing/statements/2026-10/xls/").status_code == 404
    so_far = client.get("/billing/statements/2026-12/csv/")
    assert "statement-2026-12.csv" in so_far["Content-Disposition"]
    assert "2026-12-03 09:00:00" in b"".join(so_far.streaming_content).decode()  # cut now
    assert Statement.objects.filter(tenant_id=user.tenant_id).count() == 1  # and not kept
    future = client.get("/billing/statements/2027-01/pdf/", follow=True)
    assert "2027-01 has not begun yet" in future.content.decode()
    assert "not a month" in client.get("/billing/statements/nov/pdf/", follow=True).content.decode()
    stranger = signed_in(make_user())
    stranger.get("/billing/statements/2026-10/pdf/")
    assert Statement.objects.filter(tenant_id=user.tenant_id).count() == 1


def _charge(user, instance_id, minute, fen):
    ledger_post(
        wallet_id=user.tenant.wallet.id,
        key=f"usage:{instance_id}:1:{minute}",
        kind=TransactionKind.USAGE,
        amount_fen=-fen,
        description="GPU usage",
        instance_id=instance_id,
        allow_partial=True,
    )


def _usage_rows(html):
    table = _first(r'<table class="table table-stack usage-table">.*?</thead>(.*?)</table>', html)
    cells = re.findall(
        r"<tr[^>]*>\s*<t[dh][^>]*>(.*?)</t[dh]>\s*<td[^>]*>(.*?)</td>\s*<td[^>]*>(.*?)</td>\s*<td[^>]*>(.*?)</td>",
        table,
        re.S,
    )
    return [tuple(unescape(c.strip()) for c in row) for row in cells]


@pytest.mark.parametrize("group_by", ["instance", "day", "member"])
def test_the_usage_table_is_the_apis_numbers(signed_in, clock, group_by):
    clock["at"] = datetime(2026, 11, 10, 23, 58, tzinfo=TZ)
    user = make_user()
    fund(user, 50_000)
    instance = make_instance(user)
    _charge(user, instance.id, 1, 100)
    clock["at"] = datetime(2026, 11, 11, 0, 1, tzinfo=TZ)
    _charge(user, instance.id, 2, 150)
    ledger_post(
        wallet_id=user.tenant.wallet.id,
        key="storage:dsk_gone:2026-11-11",
        kind=TransactionKind.USAGE,
        amount_fen=-30,
        description="Cloud disk storage",
    )
    query = {"from": "2026-11-01", "to": "2026-11-30", "group_by": group_by}
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user)[1]}")
    expected = api.get("/api/v1/billing/usage", query).json()

    client = signed_in(user)
    page = client.get(
        "/billing/", {"start": "2026-11-01", "end": "2026-11-30", "group_by": group_by}
    )
    rows = _usage_rows(page.content.decode())

    def money(fen):
        return f"¥{fen / 100:,.2f}"

    assert rows[:-1] == [
        (r["label"], str(r["minutes"]), f"{r['gpu_hours']:.2f}", money(r["amount_fen"]))
        for r in expected["rows"]
    ]
    totals = expected["totals"]
    assert rows[-1] == (
        "Total",
        str(totals["minutes"]),
        f"{totals['gpu_hours']:.2f}",
        money(totals["amount_fen"]),
    )
    assert totals["amount_fen"] == 280
    csv_link = f"/billing/usage.csv?start=2026-11-01&amp;end=2026-11-30&amp;group_by={group_by}"
    assert csv_link in page.content.decode()
    sheet = client.get(unescape(csv_link))
    assert sheet["Content-Type"] == "text/csv; charset=utf-8"
    assert sheet.content == api.get("/api/v1/billing/usage", {**query, "format": "csv"}).content


def test_a_bad_usage_range_is_shown_at_the_field(signed_in):
    client = signed_in(make_user())
    html = client.get(
        "/billing/", {"start": "2026-11-30", "end": "2026-11-01", "group_by": "day"}
    ).content.decode()
    assert "The last day comes before the first." in _field_error(html, "end")
    assert "usage-table" not in html and "/billing/usage.csv" not in html
    answer = client.get("/billing/usage.csv", {"start": "x", "end": "2026-11-01"}, follow=True)
    assert "Enter a valid date." in answer.content.decode()


def test_a_storage_charge_is_not_called_compute_in_chinese(signed_in):
    """Every usage line, a cloud disk's day as much as GPU time, is one kind: in zh-Hans its
    name must fit both (it said 算力消费, compute)."""
    user = make_user()
    fund(user, 1_000)
    ledger_post(
        wallet_id=user.tenant.wallet.id,
        key=f"storage:test:{user.id}",
        kind=TransactionKind.USAGE,
        amount_fen=-30,
        description="Cloud disk ckpt, 100 GB, one day",
    )

    html = signed_in(user).get("/billing/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").content.decode()

    row = html[html.index("Cloud disk ckpt") - 2000 : html.index("Cloud disk ckpt")]
    assert "资源消费" in row and "算力" not in row
