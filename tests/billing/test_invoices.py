import json

import pytest
from django.core import mail
from django.core.files.base import ContentFile
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from billing.choices import InvoiceStatus, RefundStatus, TransactionKind
from billing.invoices import (
    invoice_issue,
    invoice_profile_save,
    invoice_reject,
    invoice_request,
    invoiceable_fen,
    invoiced_over_paid_fen,
    tax_number_valid,
)
from billing.models import InvoiceProfile, InvoiceRequest, LedgerTransaction, Refund, TopUp
from billing.onboarding import team_create
from billing.payments import bank_transfer_post
from billing.services import adjustment_post, ledger_post, transaction_reverse
from starverse.accounts.teams import acting_in
from starverse.core.errors import Conflict, FieldInvalid, IdempotencyConflict, InvalidInput
from teams.services import FROM_TEAM, TO_TEAM, transfer_make
from tests.conftest import run_threads
from tests.factories import fund, make_operator, make_user, staff_login

TAX = "91350100M000100Y43"  # a well-formed 统一社会信用代码
PROFILE = {"title": "清华大学", "tax_number": TAX, "email": "finance@tsinghua.example.cn"}
PDF = b"%PDF-1.4\n% an issued invoice\n"


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)


def _profiled(**extra):
    user = make_user()
    invoice_profile_save(tenant_id=user.tenant_id, data={**PROFILE, **extra})
    return user


def test_tax_number_check_digit():
    assert tax_number_valid(TAX)
    assert not tax_number_valid("91350100M000100Y42")  # wrong check character
    assert not tax_number_valid("91350100M000100Y4")  # 17 characters
    assert not tax_number_valid("91350100M000100I43")  # I is not in the GB 32100 set


def test_profile_refuses_a_bad_tax_number_naming_it(db):
    user = make_user()
    with pytest.raises(FieldInvalid) as refused:
        invoice_profile_save(tenant_id=user.tenant_id, data={**PROFILE, "tax_number": "123"})
    assert refused.value.field == "tax_number"
    assert not InvoiceProfile.objects.exists()


def test_special_invoice_needs_the_bank_details(db):
    user = make_user()
    with pytest.raises(FieldInvalid) as refused:
        invoice_profile_save(tenant_id=user.tenant_id, data={**PROFILE, "kind": "special"})
    assert refused.value.field == "address"
    full = {"address": "北京市海淀区", "phone": "010-1", "bank": "工商银行", "bank_account": "0200"}
    saved = invoice_profile_save(
        tenant_id=user.tenant_id, data={**PROFILE, "kind": "special", **full}
    )
    assert (saved.kind, saved.bank_account) == ("special", "0200")


def test_invoiceable_is_paid_less_refunds_reversals_and_requests(db, payments):
    user = _profiled()
    assert invoiceable_fen(user.tenant_id) == 0  # the trial credit is not paid money
    fund(user, 50_000)
    operator = make_operator()
    bank_transfer_post(
        wallet_id=user.tenant.wallet.id,
        amount_fen=20_000,
        payer="清华",
        reference="B1",
        reason="transfer",
        actor=operator,
    )
    assert invoiceable_fen(user.tenant_id) == 70_000
    transfer = TopUp.objects.get(bank_reference="B1").ledger_transaction_id
    transaction_reverse(transaction_id=str(transfer), reason="posted twice", actor=operator)
    assert invoiceable_fen(user.tenant_id) == 50_000
    invoice_request(user=user, amount_fen=30_000)
    assert invoiceable_fen(user.tenant_id) == 20_000
    # a refund reserves its amount as it is asked for
    topup = TopUp.objects.create(
        tenant=user.tenant, wallet=user.tenant.wallet, created_by=user, amount_fen=5_000
    )
    reserve = ledger_post(
        wallet_id=user.tenant.wallet.id,
        key="refund:test",
        kind=TransactionKind.REFUND,
        amount_fen=-5_000,
        description="Refund",
    )
    Refund.objects.create(
        topup=topup,
        amount_fen=5_000,
        reason="r",
        requested_by=operator,
        reserve_transaction=reserve,
    )
    assert invoiceable_fen(user.tenant_id) == 15_000
    Refund.objects.update(status=RefundStatus.FAILED)
    assert invoiceable_fen(user.tenant_id) == 20_000


def test_request_above_the_invoiceable_amount_is_refused_and_nothing_written(db):
    user = _profiled()
    fund(user, 10_000)
    with pytest.raises(FieldInvalid) as refused:
        invoice_request(user=user, amount_fen=10_001)
    assert (refused.value.field, refused.value.code) == ("amount_fen", "over_invoiceable")
    assert not InvoiceRequest.objects.exists()
    item, created = invoice_request(user=user, amount_fen=10_000)
    assert created and item.profile["tax_number"] == TAX and item.status == "requested"


def test_request_needs_a_profile(db):
    user = make_user()
    fund(user, 10_000)
    with pytest.raises(InvalidInput) as refused:
        invoice_request(user=user, amount_fen=100)
    assert refused.value.code == "no_invoice_profile"


def test_idempotency_key_answers_the_first_request(db):
    user = _profiled()
    fund(user, 10_000)
    first, created = invoice_request(user=user, amount_fen=4_000, idempotency_key="k1")
    again, created_again = invoice_request(user=user, amount_fen=4_000, idempotency_key="k1")
    assert (created, created_again, again.pk) == (True, False, first.pk)
    with pytest.raises(IdempotencyConflict):
        invoice_request(user=user, amount_fen=5_000, idempotency_key="k1")
    assert InvoiceRequest.objects.count() == 1


def test_profile_snapshot_survives_later_edits(db):
    user = _profiled()
    fund(user, 10_000)
    item, _created = invoice_request(user=user, amount_fen=1_000)
    invoice_profile_save(tenant_id=user.tenant_id, data={**PROFILE, "title": "Other"})
    item.refresh_from_db()
    assert item.profile["title"] == "清华大学"


def test_issue_with_pdf_mails_the_user_and_the_profile_address(
    db, django_capture_on_commit_callbacks
):
    user = _profiled()
    fund(user, 10_000)
    item, _created = invoice_request(user=user, amount_fen=8_000)
    operator = make_operator()
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        issued = invoice_issue(
            invoice_id=item.id, actor=operator, number="No.123", pdf=ContentFile(PDF, name="x.pdf")
        )
    assert (issued.status, issued.number, issued.decided_by) == ("issued", "No.123", operator)
    assert issued.pdf.read() == PDF
    [message] = mail.outbox
    assert set(message.to) == {user.email, PROFILE["email"]}
    assert "No.123" in message.body and "¥80.00" in message.subject
    with pytest.raises(Conflict):
        invoice_reject(invoice_id=item.id, actor=operator, reason="late")
    item.refresh_from_db()
    assert item.status == InvoiceStatus.ISSUED


def test_issue_refuses_a_non_pdf_and_nothing_changes(db):
    user = _profiled()
    fund(user, 10_000)
    item, _created = invoice_request(user=user, amount_fen=8_000)
    with pytest.raises(InvalidInput):
        invoice_issue(invoice_id=item.id, actor=make_operator(), pdf=ContentFile(b"<html>", "x"))
    with pytest.raises(InvalidInput):
        invoice_issue(invoice_id=item.id, actor=make_operator())
    item.refresh_from_db()
    assert (item.status, item.pdf.name) == ("requested", "")


def test_reject_frees_the_amount_and_tells_why(db, django_capture_on_commit_callbacks):
    user = _profiled()
    fund(user, 10_000)
    item, _created = invoice_request(user=user, amount_fen=10_000)
    assert invoiceable_fen(user.tenant_id) == 0
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        invoice_reject(invoice_id=item.id, actor=make_operator(), reason="抬头与税号不符")
    assert invoiceable_fen(user.tenant_id) == 10_000
    [message] = mail.outbox
    assert "抬头与税号不符" in message.body and "rejected" in message.subject


def test_concurrent_requests_never_exceed_the_invoiceable_amount(transactional_db):
    user = _profiled()
    fund(user, 10_000)

    def ask(_index: int) -> str:
        try:
            invoice_request(user=user, amount_fen=3_000)
        except FieldInvalid:
            return "refused"
        return "ok"

    results = run_threads(8, ask)
    assert sorted(results) == ["ok"] * 3 + ["refused"] * 5
    assert sum(InvoiceRequest.objects.values_list("amount_fen", flat=True)) == 9_000


def test_operator_issues_in_the_admin_and_the_user_downloads_it(
    db, client, client_for, django_capture_on_commit_callbacks
):
    user = _profiled()
    fund(user, 10_000)
    item, _created = invoice_request(user=user, amount_fen=6_000)
    staff_login(client, make_operator())
    listed = client.get("/admin/billing/invoicerequest/?status__exact=requested")
    assert item.id in listed.content.decode()
    api = client_for(user)
    assert api.get(f"/api/v1/billing/invoices/{item.id}/pdf").status_code == 404

    upload = ContentFile(PDF, name="fapiao.pdf")
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            f"/admin/billing/invoicerequest/{item.id}/issue/",
            {"number": "24110000000012345678", "pdf": upload, "note": ""},
        )
    assert answer.status_code == 302
    item.refresh_from_db()
    assert (item.status, item.number) == ("issued", "24110000000012345678")
    shown = api.get(f"/api/v1/billing/invoices/{item.id}").json()
    assert shown["status"] == "issued"
    assert shown["pdf_url"] == f"/api/v1/billing/invoices/{item.id}/pdf"
    download = api.get(shown["pdf_url"])
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == PDF
    stranger = client_for(make_user())
    assert stranger.get(shown["pdf_url"]).status_code == 404


def test_operator_rejects_with_a_reason_in_the_admin(db, client):
    user = _profiled()
    fund(user, 10_000)
    item, _created = invoice_request(user=user, amount_fen=6_000)
    staff_login(client, make_operator())
    refused = client.post(f"/admin/billing/invoicerequest/{item.id}/reject/", {"reason": ""})
    assert refused.status_code == 200
    item.refresh_from_db()
    assert item.status == "requested"
    client.post(f"/admin/billing/invoicerequest/{item.id}/reject/", {"reason": "税号有误"})
    item.refresh_from_db()
    assert (item.status, item.note) == ("rejected", "税号有误")


def test_api_invoice_flow_and_field_named_errors(db, client_for):
    user = make_user()
    fund(user, 10_000)
    api = client_for(user)
    empty = api.get("/api/v1/billing/invoice-profile").json()
    assert (empty["title"], empty["updated_at"], empty["invoiceable_fen"]) == ("", None, 10_000)
    bad = api.put("/api/v1/billing/invoice-profile", {**PROFILE, "tax_number": "X"}, format="json")
    assert bad.status_code == 400 and "tax_number" in bad.json()["errors"]
    saved = api.put("/api/v1/billing/invoice-profile", PROFILE, format="json")
    assert saved.status_code == 200 and saved.json()["tax_number"] == TAX
    over = api.post("/api/v1/billing/invoices", {"amount_fen": 10_001}, format="json")
    assert over.status_code == 400
    assert over.json()["code"] == "over_invoiceable" and "amount_fen" in over.json()["errors"]
    made = api.post(
        "/api/v1/billing/invoices", {"amount_fen": 4_000}, format="json", HTTP_IDEMPOTENCY_KEY="a"
    )
    again = api.post(
        "/api/v1/billing/invoices", {"amount_fen": 4_000}, format="json", HTTP_IDEMPOTENCY_KEY="a"
    )
    assert (made.status_code, again.status_code) == (201, 200)
    assert made.json()["id"] == again.json()["id"]
    assert api.get("/api/v1/billing/invoices").json()["count"] == 1
    assert api.get("/api/v1/billing/invoice-profile").json()["invoiceable_fen"] == 6_000
    assert (
        client_for(make_user()).get(f"/api/v1/billing/invoices/{made.json()['id']}").status_code
        == 404
    )


def test_pdf_not_issued_yet_is_a_json_404_even_when_asking_for_pdf(db, client_for):
    user = _profiled()
    fund(user, 10_000)
    item, _created = invoice_request(user=user, amount_fen=1_000)
    answer = client_for(user).get(
        f"/api/v1/billing/invoices/{item.id}/pdf", HTTP_ACCEPT="application/pdf"
    )
    assert answer.status_code == 404
    assert json.loads(answer.content)["code"] == "no_file"


def _team(owner, name):
    """A team of `owner` with invoice details of its own title."""
    team = team_create(user=owner, name=name)
    invoice_profile_save(tenant_id=team.pk, data={**PROFILE, "title": name})
    return team


def _carried(tenant_id):
    """The invoiceable portions of the tenant's transfer rows, oldest first."""
    return list(
        LedgerTransaction.objects.filter(wallet__tenant_id=tenant_id, kind=TransactionKind.TRANSFER)
        .order_by("created_at", "id")
        .values_list("cash_delta_fen", "invoiceable_delta_fen")
    )


def test_moving_invoiced_money_round_teams_is_not_invoiced_twice(db):
    """The issue's loop: ¥1,000 paid once, moved to a new team, invoiced there, moved back and
    on to another team: the second invoice is refused and nothing is written; the ¥1,000 was
    invoiced once, and nothing more can be anywhere."""
    person = _profiled()
    fund(person, 100_000)
    first = _team(person, "Lab A")
    transfer_make(user=person, team=first, amount_fen=100_000, direction=TO_TEAM)
    invoice_request(user=acting_in(person, first), amount_fen=100_000)
    transfer_make(user=person, team=first, amount_fen=100_000, direction=FROM_TEAM)
    second = _team(person, "Lab B")
    transfer_make(user=person, team=second, amount_fen=100_000, direction=TO_TEAM)

    with pytest.raises(FieldInvalid) as refused:
        invoice_request(user=acting_in(person, second), amount_fen=100_000)

    assert (refused.value.field, refused.value.code) == ("amount_fen", "over_invoiceable")
    assert refused.value.message == (
        "¥1,000.00 is more than can be invoiced: ¥0.00 (top-ups and bank transfers paid in, "
        "with the paid cash not yet invoiced that transfers carried in less what they carried "
        "out, less refunds and invoices already requested)."
    )
    assert list(InvoiceRequest.objects.values_list("tenant_id", "amount_fen")) == [
        (first.pk, 100_000)
    ]
    assert [invoiceable_fen(t) for t in (person.tenant_id, first.pk, second.pk)] == [0, 0, 0]
    assert _carried(first.pk) == [(100_000, 100_000), (-100_000, 0)]
    assert _carried(second.pk) == [(100_000, 0)]
    with pytest.raises(FieldInvalid):
        invoice_request(user=person, amount_fen=1)
    assert InvoiceRequest.objects.count() == 1


def test_money_paid_personally_and_moved_to_a_team_is_invoiced_there(db):
    person = _profiled()
    fund(person, 100_000)
    team = _team(person, "Lab A")
    transfer_make(user=person, team=team, amount_fen=60_000, direction=TO_TEAM)

    item, created = invoice_request(user=acting_in(person, team), amount_fen=60_000)

    assert (created, item.tenant_id, item.profile["title"]) == (True, team.pk, "Lab A")
    assert (invoiceable_fen(person.tenant_id), invoiceable_fen(team.pk)) == (40_000, 0)
    assert _carried(person.tenant_id) == [(-60_000, -60_000)]
    assert _carried(team.pk) == [(60_000, 60_000)]


def test_invoiced_and_unpaid_cash_moves_without_invoiceability(db):
    """Of ¥1,000 paid (¥300 invoiced) and ¥500 an operator credited, moving ¥1,200 carries the
    ¥700 paid and not invoiced; moving what is left carries nothing."""
    person = _profiled()
    fund(person, 100_000)
    invoice_request(user=person, amount_fen=30_000)
    adjustment_post(
        wallet_id=person.tenant.wallet.id,
        amount_fen=50_000,
        reason="goodwill",
        actor=make_operator(),
    )
    team = _team(person, "Lab A")

    transfer_make(user=person, team=team, amount_fen=120_000, direction=TO_TEAM)
    transfer_make(user=person, team=team, amount_fen=30_000, direction=TO_TEAM)

    assert _carried(team.pk) == [(120_000, 70_000), (30_000, 0)]
    assert _carried(person.tenant_id) == [(-120_000, -70_000), (-30_000, 0)]
    assert (invoiceable_fen(person.tenant_id), invoiceable_fen(team.pk)) == (0, 70_000)
    with pytest.raises(FieldInvalid):
        invoice_request(user=acting_in(person, team), amount_fen=70_001)
    assert InvoiceRequest.objects.filter(tenant=team).count() == 0


def test_an_invoice_and_a_transfer_at_once_invoice_the_money_once(transactional_db):
    """A request for an invoice and a transfer of the same paid cash, side by side: whichever
    comes second sees the first (both read under the person's wallet lock), so the team can
    invoice only what the person did not."""
    person = _profiled()
    fund(person, 100_000)
    team = _team(person, "Lab A")

    def act(index: int) -> str:
        if index == 0:
            invoice_request(user=person, amount_fen=100_000)
        else:
            transfer_make(user=person, team=team, amount_fen=100_000, direction=TO_TEAM)
        return "ok"

    results = run_threads(2, act)
    left = invoiceable_fen(team.pk)
    if left:
        invoice_request(user=acting_in(person, team), amount_fen=left)

    assert results[1] == "ok"
    assert sum(InvoiceRequest.objects.values_list("amount_fen", flat=True)) == 100_000
    assert (invoiceable_fen(person.tenant_id), invoiceable_fen(team.pk)) == (0, 0)
    assert invoiced_over_paid_fen(person.tenant_id) == 0


def test_transfers_posted_before_portions_get_them_by_replaying_history(transactional_db, capsys):
    """Migration 0010 replays the transfers posted before it under the rule: money paid and
    not invoiced carries whole (a person's invoiceable amount is unchanged), the issue's loop
    carries nothing on, so the audit names the team that invoiced it; the ledger stays
    append-only."""
    person, other = _profiled(), _profiled()
    fund(person, 100_000)
    fund(other, 50_000)
    first, second = _team(person, "Lab A"), _team(person, "Lab B")
    mine = _team(other, "Lab C")
    transfer_make(user=person, team=first, amount_fen=100_000, direction=TO_TEAM)
    invoice_request(user=acting_in(person, first), amount_fen=100_000)
    transfer_make(user=person, team=first, amount_fen=100_000, direction=FROM_TEAM)
    transfer_make(user=person, team=second, amount_fen=100_000, direction=TO_TEAM)
    transfer_make(user=other, team=mine, amount_fen=30_000, direction=TO_TEAM)
    # the second invoice of the loop, as invoice_request granted it before
    InvoiceRequest.objects.create(
        tenant=second, requested_by=person, amount_fen=100_000, profile=PROFILE
    )
    executor = MigrationExecutor(connection)
    executor.migrate([("billing", "0009_ledger_price_kind")])

    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert _carried(first.pk) == [(100_000, 100_000), (-100_000, 0)]
    assert _carried(second.pk) == [(100_000, 0)]
    assert _carried(mine.pk) == [(30_000, 30_000)]
    assert [invoiceable_fen(t) for t in (person.tenant_id, second.pk, mine.pk)] == [0, 0, 30_000]
    assert invoiceable_fen(other.tenant_id) == 20_000
    capsys.readouterr()  # the log lines of the steps above
    with pytest.raises(CommandError, match="1 account"):
        call_command("billing_audit")
    assert capsys.readouterr().err == (
        f"OVER_INVOICED tenant={second.pk} invoiced=¥1,000.00 paid=¥0.00 carried=¥0.00 "
        "returned=¥0.00 over=¥1,000.00\n"
    )
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE billing_ledgertransaction SET invoiceable_delta_fen = 0")
