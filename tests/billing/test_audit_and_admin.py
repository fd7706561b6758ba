import pytest
from django.contrib.admin.utils import quote
from django.core.management import CommandError, call_command
from django.db import connection

from billing.choices import TransactionKind
from billing.invoices import invoice_profile_save, invoice_request
from billing.models import InvoiceRequest, LedgerTransaction, Refund, TopUp, Wallet
from billing.onboarding import team_create
from billing.services import ledger_post
from starverse.accounts.teams import acting_in
from starverse.core.adminurls import admin_change_url
from teams.services import TO_TEAM, transfer_make
from tests.billing.test_invoices import PROFILE
from tests.factories import fund, make_operator, make_user, staff_login


def test_billing_audit_passes_then_names_the_drifting_wallet(db, capsys):
    users = [make_user(), make_user()]
    call_command("billing_audit")
    assert "OK: 2 wallet(s)" in capsys.readouterr().out
    drifting = Wallet.objects.get(tenant=users[1].tenant)

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE billing_wallet SET cash_fen = cash_fen + 1 WHERE id = %s", [drifting.id]
        )
    with pytest.raises(CommandError, match="1 wallet"):
        call_command("billing_audit")

    assert f"DRIFT wallet={drifting.id}" in capsys.readouterr().err


def _paid_and_moved(fen):
    """A person who paid `fen`, moved it all to a team of theirs and invoiced it there."""
    person = make_user()
    fund(person, fen)
    team = team_create(user=person, name="Lab A")
    invoice_profile_save(tenant_id=team.pk, data=PROFILE)
    transfer_make(user=person, team=team, amount_fen=fen, direction=TO_TEAM)
    invoice_request(user=acting_in(person, team), amount_fen=fen)
    return person, team


def test_billing_audit_passes_on_money_moved_and_invoiced_once(db, capsys):
    _paid_and_moved(100_000)

    call_command("billing_audit")

    captured = capsys.readouterr()
    assert captured.out == "OK: 2 wallet(s) equal their ledger sums.\n"
    assert captured.err == ""


def test_billing_audit_names_an_account_invoiced_over_what_was_paid_in(db, capsys):
    """An invoice no service would allow (as the transfer loop of before made): the audit
    names the account and fails."""
    person, _team = _paid_and_moved(100_000)
    InvoiceRequest.objects.create(
        tenant_id=person.tenant_id, requested_by=person, amount_fen=50_000, profile=PROFILE
    )

    with pytest.raises(CommandError, match="1 account\\(s\\) invoiced over what was paid in"):
        call_command("billing_audit")

    assert capsys.readouterr().err == (
        f"OVER_INVOICED tenant={person.tenant_id} invoiced=¥500.00 paid=¥1,000.00 "
        "carried=-¥1,000.00 returned=¥0.00 over=¥500.00\n"
    )


def test_billing_audit_lists_a_refund_after_an_invoice_and_passes(db, capsys):
    """A refund an operator made after the 发票 leaves the invoice over the cash kept: listed,
    to be voided (红冲) outside the platform, but not a fault of the books."""
    person = make_user()
    invoice_profile_save(tenant_id=person.tenant_id, data=PROFILE)
    fund(person, 10_000)
    invoice_request(user=person, amount_fen=10_000)
    topup = TopUp.objects.create(
        tenant=person.tenant, wallet=person.tenant.wallet, created_by=person, amount_fen=10_000
    )
    reserve = ledger_post(
        wallet_id=person.tenant.wallet.id,
        key="refund:audit",
        kind=TransactionKind.REFUND,
        amount_fen=-4_000,
        description="Refund",
    )
    Refund.objects.create(
        topup=topup,
        amount_fen=4_000,
        reason="r",
        requested_by=make_operator(),
        reserve_transaction=reserve,
    )

    call_command("billing_audit")

    assert capsys.readouterr().out == (
        f"REFUNDED_AFTER_INVOICE tenant={person.tenant_id} invoiced=¥100.00 paid=¥100.00 "
        "carried=¥0.00 returned=¥40.00 over=¥40.00\n"
        "OK: 2 wallet(s) equal their ledger sums.\n"
        "1 account(s) refunded after invoicing (REFUNDED_AFTER_INVOICE above): void (红冲) "
        "those invoices.\n"
    )


def test_billing_audit_fails_on_a_transfer_whose_portions_do_not_net_to_zero(db, capsys):
    team = team_create(user=make_user(), name="Lab A")
    ledger_post(
        wallet_id=Wallet.objects.get(tenant=team).pk,
        key="transfer:lone:in",
        kind=TransactionKind.TRANSFER,
        amount_fen=5_000,
        description="Transfer between wallets",
        invoiceable_delta_fen=5_000,
    )

    with pytest.raises(CommandError, match="1 transfer\\(s\\) whose invoiceable portions"):
        call_command("billing_audit")

    assert capsys.readouterr().err == "CARRY_UNBALANCED transfer=transfer:lone net=¥50.00\n"


@pytest.fixture
def operator_client(client, db):
    staff_login(client, make_operator())
    return client


def test_admin_offers_the_ledger_read_only(operator_client):
    txn = LedgerTransaction.objects.get(wallet__tenant=make_user().tenant)
    change_url = admin_change_url("billing_ledgertransaction", txn.id)

    listing = operator_client.get("/admin/billing/ledgertransaction/")
    page = operator_client.get(change_url)
    post = operator_client.post(change_url, {"description": "edited"})

    assert listing.status_code == 200 and txn.id in listing.content.decode()
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    assert post.status_code == 403
    assert operator_client.get("/admin/billing/ledgertransaction/add/").status_code == 403
    assert (
        operator_client.post(
            f"/admin/billing/ledgertransaction/{quote(txn.id)}/delete/"
        ).status_code
        == 403
    )
    assert LedgerTransaction.objects.get(pk=txn.pk).description == "Trial credit"


def test_admin_adjustment_requires_a_reason_and_records_who(operator_client):
    wallet = Wallet.objects.get(tenant=make_user().tenant)
    url = f"/admin/billing/wallet/{wallet.id}/adjust/"

    missing = operator_client.post(url, {"amount": "50", "reason": ""})
    bad_amount = operator_client.post(url, {"amount": "5.001", "reason": "x"})
    posted = operator_client.post(url, {"amount": "¥50.00", "reason": "SLA credit ticket 88"})

    assert missing.status_code == 200 and "This field is required" in missing.content.decode()
    assert bad_amount.status_code == 200
    assert posted.status_code == 302
    adjustment = LedgerTransaction.objects.get(kind="adjustment")
    assert (adjustment.amount_fen, adjustment.reason, adjustment.cash_after_fen) == (
        5000,
        "SLA credit ticket 88",
        5000,
    )
    assert adjustment.created_by is not None and adjustment.created_by.is_staff
    wallet.refresh_from_db()
    assert wallet.cash_fen == 5000


def test_admin_reversal_form(operator_client):
    wallet = Wallet.objects.get(tenant=make_user().tenant)
    operator_client.post(
        f"/admin/billing/wallet/{wallet.id}/adjust/", {"amount": "20", "reason": "oops"}
    )
    adjustment = LedgerTransaction.objects.get(kind="adjustment")
    url = f"/admin/billing/ledgertransaction/{adjustment.id}/reverse/"

    first = operator_client.post(url, {"reason": "posted to the wrong wallet"})
    second = operator_client.post(url, {"reason": "again"})

    assert first.status_code == 302
    assert "already reversed" in second.content.decode()
    wallet.refresh_from_db()
    assert wallet.cash_fen == 0


def test_renters_cannot_open_the_admin(client, user):
    client.force_login(user)

    assert client.get("/admin/billing/ledgertransaction/").status_code == 302


def test_admin_bank_transfer_form_posts_once(operator_client, settings):
    # within the approval threshold and the daily cap: posted at once
    settings.ADJUSTMENT_APPROVAL_THRESHOLD_FEN = settings.ADMIN_DAILY_CAP_FEN = 10_000_000
    wallet = Wallet.objects.get(tenant=make_user().tenant)
    url = f"/admin/billing/wallet/{wallet.id}/bank-transfer/"
    form = {"amount": "20,000.00", "payer": "清华大学", "reference": "BOC-8812", "reason": "grant"}

    first = operator_client.post(url, form)
    second = operator_client.post(url, form)
    negative = operator_client.post(url, {**form, "reference": "BOC-8813", "amount": "-5"})

    assert first.status_code == 302
    assert "already posted" in second.content.decode()
    assert "positive amount" in negative.content.decode()
    wallet.refresh_from_db()
    assert wallet.cash_fen == 2_000_000


def test_admin_large_adjustment_waits_for_another_operator(operator_client, client, settings):
    settings.ADJUSTMENT_APPROVAL_THRESHOLD_FEN = 10_000
    wallet = Wallet.objects.get(tenant=make_user().tenant)

    operator_client.post(
        f"/admin/billing/wallet/{wallet.id}/adjust/", {"amount": "500", "reason": "deal"}
    )
    from billing.models import AdjustmentRequest

    request = AdjustmentRequest.objects.get()
    own = operator_client.post(
        "/admin/billing/adjustmentrequest/",
        {"action": "approve", "_selected_action": [request.id]},
        follow=True,
    )
    assert "second operator" in own.content.decode()
    staff_login(client, make_operator())
    client.post(
        "/admin/billing/adjustmentrequest/", {"action": "approve", "_selected_action": [request.id]}
    )

    wallet.refresh_from_db()
    request.refresh_from_db()
    assert (request.status, wallet.cash_fen) == ("approved", 50_000)


def _stripe_event(event_id, *, minutes_ago=10):
    from datetime import timedelta

    from django.utils import timezone

    from billing.models import StripeEvent

    return StripeEvent.objects.create(
        id=event_id,
        type="checkout.session.completed",
        payload={"id": event_id, "data": {"object": {"id": "cs_gone"}}},
        received_at=timezone.now() - timedelta(minutes=minutes_ago),
    )


def _broken_gateway(monkeypatch):
    from billing import stripe_gateway
    from billing.stripe_gateway import PermanentGatewayError

    def fail(session_id):
        raise PermanentGatewayError(f"No such checkout.session: {session_id}")

    monkeypatch.setattr(stripe_gateway, "checkout_session_retrieve", fail)


def test_a_failing_stripe_event_is_retried_up_to_the_cap_then_left_for_an_operator(db, monkeypatch):
    from billing import tasks
    from billing.models import StripeEvent
    from billing.payments import STRIPE_EVENT_MAX_ATTEMPTS
    from billing.stripe_gateway import PermanentGatewayError

    _broken_gateway(monkeypatch)
    _stripe_event("evt_broken")
    calls: list[str] = []
    monkeypatch.setattr(tasks.process_stripe_event, "delay", calls.append)

    for _ in range(STRIPE_EVENT_MAX_ATTEMPTS + 3):
        before = len(calls)
        tasks.retry_unprocessed_events()
        if len(calls) > before:  # what the worker would run
            with pytest.raises(PermanentGatewayError, match=r"No such checkout\.session"):
                tasks.process_stripe_event.run("evt_broken")

    event = StripeEvent.objects.get()
    assert STRIPE_EVENT_MAX_ATTEMPTS == 8
    assert calls == ["evt_broken"] * 8
    assert (event.attempts, event.processed_at) == (8, None)
    assert event.error == "PermanentGatewayError: No such checkout.session: cs_gone"


def test_a_stripe_event_whose_task_was_lost_is_sent_again_once_the_reconcile_patience_passed(
    db, monkeypatch, settings
):
    """A top-up Stripe was answered 200 for, whose task a killed worker or a flushed broker
    lost: sent again once RECONCILE_STUCK_AFTER_S old (the chaos drill found it waiting 10
    minutes), not while it may still be in a worker's hands."""
    from billing import tasks

    settings.RECONCILE_STUCK_AFTER_S = 60
    _stripe_event("evt_lost", minutes_ago=1.5)
    _stripe_event("evt_fresh", minutes_ago=0.5)
    calls: list[str] = []
    monkeypatch.setattr(tasks.process_stripe_event, "delay", calls.append)

    tasks.retry_unprocessed_events()

    assert calls == ["evt_lost"]


def test_admin_lists_the_events_it_gave_up_on_and_retries_them(
    operator_client, monkeypatch, django_capture_on_commit_callbacks
):
    from billing.models import StripeEvent

    gave_up = _stripe_event("evt_gave_up")
    StripeEvent.objects.filter(pk=gave_up.pk).update(attempts=8, error="Boom: once")
    _stripe_event("evt_still_trying")
    StripeEvent.objects.filter(pk="evt_still_trying").update(attempts=3)
    processed = []
    monkeypatch.setattr(
        "billing.payments._stripe_event_apply", lambda event: processed.append(event.id)
    )

    listing = operator_client.get("/admin/billing/stripeevent/?gave_up=yes").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        answer = operator_client.post(
            "/admin/billing/stripeevent/",
            {"action": "retry", "_selected_action": ["evt_gave_up"]},
            follow=True,
        )

    assert "evt_gave_up" in listing
    assert "evt_still_trying" not in listing
    assert "1 unprocessed event(s) queued again." in answer.content.decode()
    assert processed == ["evt_gave_up"]
    event = StripeEvent.objects.get(pk="evt_gave_up")
    assert (event.attempts, event.error) == (9, "")
    assert event.processed_at is not None
    assert StripeEvent.objects.get(pk="evt_still_trying").processed_at is None


def test_renters_cannot_retry_stripe_events(db):
    from billing.payments import stripe_events_retry
    from starverse.core.errors import InvalidInput

    _stripe_event("evt_x")
    with pytest.raises(InvalidInput):
        stripe_events_retry(event_ids=["evt_x"], actor=make_user())
