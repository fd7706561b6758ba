"""Chargebacks and refunds made in the Stripe dashboard, driven end to end: the Stripe stand-in
opens, withdraws, reinstates and closes disputes and refunds charges by hand, emitting signed
webhooks that the tests deliver in the order they choose, as often as they like."""

import logging

import pytest
from django.core import mail
from django.core.management import call_command

from billing import payments, stripe_gateway
from billing.choices import Account, RefundSource, RefundStatus, TransactionKind
from billing.disputes import dispute_apply
from billing.holds import hold_place, tenant_on_hold
from billing.models import AccountHold, Dispute, LedgerTransaction, Refund, StripeEvent, TopUp
from billing.selectors import unbalanced_transactions, wallet_drifts
from billing.services import ledger_post, transaction_reverse
from devstack.stripe import sign
from instances.models import Instance
from starverse.core.adminurls import admin_change_url
from starverse.core.errors import Conflict
from storage.models import Disk
from tests.factories import make_instance, make_operator, make_user, staff_login

SECRET = "whsec_suite_secret"
OPS = "ops@starverse.example"


@pytest.fixture
def fake(payments, settings):
    # events are recorded, not sent: each test delivers them itself, in the order it chooses
    payments.webhook_secret, payments.deliver_webhooks = SECRET, False
    settings.STRIPE_WEBHOOK_SECRETS = [SECRET]
    settings.OPERATOR_EMAILS = [OPS]
    return payments


@pytest.fixture
def deliver(client, django_capture_on_commit_callbacks):
    """POST recorded events to the webhook, each `times` times in a row, running what they
    queue after commit (processing, mails)."""

    def run(*records, times=1):
        with django_capture_on_commit_callbacks(execute=True):
            for record in records:
                for _ in range(times):
                    response = client.generic(
                        "POST",
                        "/webhooks/stripe",
                        record.body,
                        content_type="application/json",
                        HTTP_STRIPE_SIGNATURE=sign(record.body, SECRET),
                    )
                    assert response.status_code == 200, response.content

    return run


def _event(fake, event_type):
    [record] = [r for r in fake.events if r.type == event_type]
    return record


@pytest.fixture
def renter(db, client_for):
    user = make_user()
    return user, client_for(user)


@pytest.fixture
def paid(renter, fake, deliver):
    """A ¥100 card top-up, paid and credited: cash ¥100 next to the ¥10 trial credit. Returns
    (top-up, Stripe charge id)."""
    _user, api = renter
    response = api.post("/api/v1/billing/topups", {"amount_fen": 10_000}, format="json")
    topup = TopUp.objects.get(pk=response.json()["id"])
    fake.pay(topup.checkout_session_id)
    deliver(_event(fake, "checkout.session.completed"))
    topup.refresh_from_db()
    assert topup.status == "paid"
    return topup, fake.payment_intent(topup.payment_intent_id)["latest_charge"]


def _spend(topup, fen):
    """Usage posted to the ledger (storage, a monthly rental) is paid from cash only: the trial
    credit pays only minutes at trial prices."""
    ledger_post(
        wallet_id=topup.wallet_id,
        key=f"usage:test:{fen}",
        kind=TransactionKind.USAGE,
        amount_fen=-fen,
        description="Usage",
    )


def _balances(topup):
    topup.wallet.refresh_from_db()
    wallet = topup.wallet
    return wallet.cash_fen, wallet.promo_fen, wallet.arrears_fen, wallet.total_fen


def _operator_mails():
    return [m for m in mail.outbox if m.to == [OPS]]


def _kinds(topup, kind):
    return LedgerTransaction.objects.filter(wallet_id=topup.wallet_id, kind=kind)


# --- disputes -------------------------------------------------------------------------------


def test_dispute_debits_cash_then_arrears_holds_the_account_and_tells_the_operators(
    paid, fake, deliver, caplog
):
    topup, charge = paid
    _spend(topup, 5_000)  # ¥50 of cash: ¥50 of cash left, the ¥10 trial untouched
    remote = fake.open_dispute(charge, reason="fraudulent")
    created = _event(fake, "charge.dispute.created")
    withdrawn = _event(fake, "charge.dispute.funds_withdrawn")

    with caplog.at_level(logging.WARNING, logger="billing"):
        deliver(created, withdrawn, times=2)

    dispute = Dispute.objects.get()
    assert (dispute.stripe_dispute_id, dispute.topup_id, dispute.amount_fen) == (
        remote["id"],
        topup.id,
        10_000,
    )
    assert (dispute.status, dispute.reason, dispute.closed_at) == (
        "needs_response",
        "fraudulent",
        None,
    )
    assert _balances(topup) == (0, 1_000, 5_000, -4_000)
    debit, owed = dispute.debit_transaction, dispute.arrears_transaction
    assert debit is not None and owed is not None
    assert (debit.kind, debit.idempotency_key, debit.amount_fen, debit.cash_delta_fen) == (
        "chargeback",
        f"dispute:{remote['id']}",
        -5_000,
        -5_000,
    )
    assert (owed.kind, owed.idempotency_key, owed.amount_fen, owed.arrears_delta_fen) == (
        "arrears",
        f"dispute:{remote['id']}:arrears",
        -5_000,
        5_000,
    )
    assert (owed.cash_after_fen, owed.arrears_after_fen, owed.balance_after_fen) == (
        0,
        5_000,
        -4_000,
    )
    for txn in (debit, owed):  # audited: which dispute, which event
        assert remote["id"] in txn.reason and created.id in txn.reason
    assert sorted(owed.entries.values_list("account", "amount_fen")) == [
        (Account.ARREARS, -5_000),
        (Account.CHARGEBACKS, 5_000),
    ]
    assert _kinds(topup, TransactionKind.CHARGEBACK).count() == 1
    assert _kinds(topup, TransactionKind.ARREARS).count() == 1
    assert wallet_drifts() == [] and unbalanced_transactions() == []
    [hold] = AccountHold.objects.all()
    assert (hold.tenant_id, hold.key, hold.dispute_id, hold.lifted_at) == (
        topup.tenant_id,
        f"dispute:{remote['id']}",
        dispute.id,
        None,
    )
    [notice] = _operator_mails()
    assert remote["id"] in notice.subject
    for line in (
        f"top-up {topup.id} (¥100.00)",
        "Debited from cash: ¥50.00",
        "Into arrears: ¥50.00",
        "Balance now: -¥40.00",
        admin_change_url("billing_dispute", dispute.id),
    ):
        assert line in notice.body
    assert any(
        r.levelno == logging.WARNING and r.getMessage().startswith("billing.dispute ")
        for r in caplog.records
    )
    assert StripeEvent.objects.filter(processed_at__isnull=True).count() == 0


def test_a_replayed_or_reapplied_dispute_moves_no_more_money(paid, fake, deliver):
    topup, charge = paid
    fake.open_dispute(charge)
    created = _event(fake, "charge.dispute.created")
    withdrawn = _event(fake, "charge.dispute.funds_withdrawn")
    deliver(created, withdrawn)
    before = (_balances(topup), LedgerTransaction.objects.count(), len(mail.outbox))

    for record in (created, withdrawn):  # the retry sweep, and a worker that applies it again
        payments.stripe_event_process(event_id=record.id)
        obj = StripeEvent.objects.get(pk=record.id).payload["data"]["object"]
        dispute_apply(
            remote=stripe_gateway.dispute_from(obj), event_id=record.id, event_type=record.type
        )
    deliver(withdrawn, created, times=3)

    assert (_balances(topup), LedgerTransaction.objects.count(), len(mail.outbox)) == before
    assert _balances(topup) == (0, 1_000, 0, 1_000)  # cash covered it: no arrears
    assert Dispute.objects.get().arrears_transaction is None
    assert AccountHold.objects.count() == 1


def test_an_order_of_a_held_account_is_refused_with_403_and_nothing_is_made(
    paid, fake, deliver, renter
):
    _user, api = renter
    _topup, charge = paid
    call_command("seed_catalog", verbosity=0)
    fake.open_dispute(charge)
    deliver(_event(fake, "charge.dispute.created"))
    order = {"offering": _offering_id(), "image": "pytorch-2.1"}

    ordered = api.post("/api/v1/instances", order, format="json")
    disk = api.post("/api/v1/disks", {"name": "ckpt", "size_gb": 10}, format="json")
    nas = api.put("/api/v1/nas", {"size_gb": 10}, format="json")
    topped_up = api.post("/api/v1/billing/topups", {"amount_fen": 5_000}, format="json")

    for refused in (ordered, disk, nas):
        assert refused.status_code == 403, refused.content
        assert refused.json()["code"] == "account_on_hold"
        assert "disputed" in refused.json()["detail"]
        assert "Contact support" in refused.json()["detail"]
    assert not Instance.objects.exists() and not Disk.objects.exists()
    assert topped_up.status_code == 201  # top-ups stay allowed, to pay what is owed
    balance = api.get("/api/v1/billing/balance").json()
    assert (balance["on_hold"], balance["arrears_fen"], balance["total_fen"]) == (True, 0, 1_000)


def _offering_id():
    from compute.models import Offering

    return Offering.objects.get(name="1× H100 80GB SXM").id


def test_a_held_account_cannot_start_a_stopped_instance(catalog, cluster, renter):
    user, api = renter
    instance = make_instance(user, "stopped", cluster=cluster)
    hold_place(tenant_id=user.tenant_id, key="dispute:dp_test", reason="test")

    response = api.post(f"/api/v1/instances/{instance.id}/start")

    assert (response.status_code, response.json()["code"]) == (403, "account_on_hold")
    instance.refresh_from_db()
    assert instance.status == "stopped"


def test_a_won_dispute_credits_back_once_pays_the_arrears_and_keeps_the_hold(paid, fake, deliver):
    topup, charge = paid
    _spend(topup, 5_000)
    remote = fake.open_dispute(charge)
    deliver(_event(fake, "charge.dispute.created"), _event(fake, "charge.dispute.funds_withdrawn"))
    fake.close_dispute(remote["id"], "won")

    deliver(
        _event(fake, "charge.dispute.funds_reinstated"),
        _event(fake, "charge.dispute.closed"),
        times=2,
    )

    dispute = Dispute.objects.get()
    credit = dispute.credit_transaction
    assert credit is not None
    assert (credit.kind, credit.idempotency_key, credit.amount_fen) == (
        "chargeback",
        f"dispute-won:{remote['id']}",
        10_000,
    )
    paid_off = LedgerTransaction.objects.get(idempotency_key=f"arrears-paid:{credit.id}")
    assert (paid_off.kind, paid_off.amount_fen, paid_off.cash_delta_fen) == ("arrears", 0, -5_000)
    assert paid_off.arrears_delta_fen == -5_000
    assert _balances(topup) == (5_000, 1_000, 0, 6_000)
    assert (dispute.status, dispute.closed_at is not None) == ("won", True)
    assert tenant_on_hold(topup.tenant_id)  # an operator decides when to lift it
    assert _kinds(topup, TransactionKind.CHARGEBACK).count() == 2
    _opened, closed = _operator_mails()
    assert "closed: won" in closed.subject
    assert wallet_drifts() == [] and unbalanced_transactions() == []


@pytest.mark.parametrize(
    ("outcome", "balances"), [("won", (10_000, 1_000, 0, 11_000)), ("lost", (0, 1_000, 0, 1_000))]
)
def test_events_in_reverse_order_end_in_the_same_place(paid, fake, deliver, outcome, balances):
    topup, charge = paid
    remote = fake.open_dispute(charge)
    fake.close_dispute(remote["id"], outcome)
    recorded = [r for r in fake.events if r.type.startswith("charge.dispute.")]

    deliver(*reversed(recorded))  # closed first, created last

    dispute = Dispute.objects.get()
    assert (dispute.status, dispute.closed_at is not None) == (outcome, True)
    assert _balances(topup) == balances
    assert _kinds(topup, TransactionKind.CHARGEBACK).count() == (2 if outcome == "won" else 1)
    assert (dispute.credit_transaction is not None) == (outcome == "won")
    assert AccountHold.objects.filter(tenant_id=topup.tenant_id).count() == 1
    assert len(_operator_mails()) == 1


def test_an_inquiry_holds_but_takes_no_money(paid, fake, deliver):
    topup, charge = paid
    remote = fake.open_dispute(charge, reason="general", inquiry=True)
    deliver(_event(fake, "charge.dispute.created"))
    fake.close_dispute(remote["id"], "won")
    deliver(_event(fake, "charge.dispute.closed"))

    dispute = Dispute.objects.get()
    assert (dispute.status, dispute.debit_transaction, dispute.credit_transaction) == (
        "warning_closed",
        None,
        None,
    )
    assert _balances(topup) == (10_000, 1_000, 0, 11_000)
    assert tenant_on_hold(topup.tenant_id)
    assert len(_operator_mails()) == 2


def test_chargeback_and_arrears_postings_are_not_reversed_by_hand(paid, fake, deliver):
    topup, charge = paid
    _spend(topup, 5_000)
    fake.open_dispute(charge)
    deliver(_event(fake, "charge.dispute.created"))
    dispute = Dispute.objects.get()
    operator = make_operator()

    for txn in (dispute.debit_transaction, dispute.arrears_transaction):
        assert txn is not None
        with pytest.raises(Conflict, match="cannot be reversed"):
            transaction_reverse(transaction_id=txn.id, reason="undo", actor=operator)

    assert _balances(topup) == (0, 1_000, 5_000, -4_000)


def test_a_top_up_pays_the_arrears_first(paid, fake, deliver, renter):
    _user, api = renter
    topup, charge = paid
    _spend(topup, 5_000)
    fake.open_dispute(charge)
    deliver(_event(fake, "charge.dispute.created"))
    mail.outbox.clear()

    response = api.post("/api/v1/billing/topups", {"amount_fen": 20_000}, format="json")
    second = TopUp.objects.get(pk=response.json()["id"])
    fake.pay(second.checkout_session_id)
    deliver([r for r in fake.events if r.type == "checkout.session.completed"][-1])

    second.refresh_from_db()
    credit = second.ledger_transaction
    assert credit is not None
    paid_off = LedgerTransaction.objects.get(idempotency_key=f"arrears-paid:{credit.id}")
    assert (paid_off.cash_delta_fen, paid_off.arrears_delta_fen, paid_off.cash_after_fen) == (
        -5_000,
        -5_000,
        15_000,
    )
    assert _balances(topup) == (15_000, 1_000, 0, 16_000)
    [receipt] = mail.outbox
    assert "¥160.00" in receipt.body  # the balance after, net of what was owed
    assert tenant_on_hold(topup.tenant_id)
    call_command("billing_audit")


# --- refunds made in the Stripe dashboard ---------------------------------------------------


def test_a_dashboard_refund_is_debited_once_into_arrears_and_holds(paid, fake, deliver):
    topup, charge = paid
    _spend(topup, 5_000)
    remote = fake.refund_in_dashboard(charge)

    deliver(_event(fake, "refund.created"), _event(fake, "charge.refunded"), times=2)

    refund = Refund.objects.get()
    assert (refund.source, refund.status, refund.amount_fen, refund.requested_by) == (
        RefundSource.DASHBOARD,
        RefundStatus.SUCCEEDED,
        10_000,
        None,
    )
    assert refund.stripe_refund_id == remote["id"]
    assert (refund.reserve_transaction.idempotency_key, refund.reserve_transaction.amount_fen) == (
        f"refund:{remote['id']}",
        -5_000,
    )
    assert refund.arrears_transaction is not None
    assert refund.arrears_transaction.arrears_delta_fen == 5_000
    assert remote["id"] in refund.arrears_transaction.reason
    assert _balances(topup) == (0, 1_000, 5_000, -4_000)
    assert _kinds(topup, TransactionKind.REFUND).count() == 1
    [hold] = AccountHold.objects.all()
    assert (hold.key, hold.refund_id) == (f"refund:{remote['id']}", refund.id)
    [notice] = _operator_mails()
    assert remote["id"] in notice.subject and "on hold" in notice.body


def test_a_dashboard_refund_cash_covers_places_no_hold(paid, fake, deliver, renter):
    _user, api = renter
    topup, charge = paid
    fake.refund_in_dashboard(charge, 3_000)

    deliver(_event(fake, "refund.created"), _event(fake, "charge.refunded"))

    assert _balances(topup) == (7_000, 1_000, 0, 8_000)
    assert Refund.objects.get().arrears_transaction is None
    assert not AccountHold.objects.exists()
    assert len(_operator_mails()) == 1
    assert api.get("/api/v1/billing/balance").json()["on_hold"] is False


def test_a_pending_dashboard_refund_is_debited_when_it_succeeds(paid, fake, deliver):
    topup, charge = paid
    remote = fake.refund_in_dashboard(charge, 4_000, pending=True)
    deliver(_event(fake, "refund.created"))
    assert not Refund.objects.exists()
    assert _balances(topup)[0] == 10_000

    fake.settle_refund(remote["id"], "succeeded")
    deliver(_event(fake, "refund.updated"), _event(fake, "charge.refunded"), times=2)

    assert Refund.objects.get().amount_fen == 4_000
    assert _balances(topup) == (6_000, 1_000, 0, 7_000)


def test_our_own_refund_is_never_debited_again_as_a_dashboard_refund(paid, fake, deliver):
    topup, _charge = paid
    refund = payments.refund_request(
        topup_id=topup.id, amount_fen=6_000, reason="unused", actor=make_operator()
    )
    stripe_refund_id = refund.stripe_refund_id
    assert stripe_refund_id is not None
    fake.settle_refund(stripe_refund_id, "succeeded")
    # Its webhooks may be processed before the Stripe id is stored on our row: the refund is
    # still known as ours by its metadata.
    Refund.objects.filter(pk=refund.pk).update(stripe_refund_id=None)

    deliver(
        _event(fake, "refund.created"),
        _event(fake, "refund.updated"),
        _event(fake, "charge.refunded"),
        times=2,
    )

    [only] = Refund.objects.all()
    assert (only.id, only.source, only.status) == (
        refund.id,
        RefundSource.OPERATOR,
        RefundStatus.SUCCEEDED,
    )
    assert _kinds(topup, TransactionKind.REFUND).count() == 1
    assert _balances(topup) == (4_000, 1_000, 0, 5_000)
    assert not AccountHold.objects.exists() and _operator_mails() == []


# --- operators -------------------------------------------------------------------------------


def test_operator_mail_goes_to_superusers_when_no_address_is_set(paid, fake, deliver, settings):
    _topup, charge = paid
    settings.OPERATOR_EMAILS = []
    first, second = make_operator(), make_operator()
    fake.open_dispute(charge)

    deliver(_event(fake, "charge.dispute.created"))

    [notice] = [m for m in mail.outbox if "disputed" in m.subject]
    assert sorted(notice.to) == sorted([first.email, second.email])


def _staff(*codenames):
    from django.contrib.auth.models import Permission

    user = make_user()
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="billing", codename__in=codenames)
    )
    return user


def test_lifting_a_hold_needs_its_permission_and_a_reason_and_is_recorded(
    paid, fake, deliver, client, renter
):
    _user, api = renter
    topup, charge = paid
    fake.open_dispute(charge)
    deliver(_event(fake, "charge.dispute.created"))
    hold = AccountHold.objects.get()
    url = f"/admin/billing/accounthold/{hold.id}/lift/"
    viewer, lifter = _staff("view_accounthold"), _staff("view_accounthold", "lift_hold")

    staff_login(client, viewer)
    refused = client.post(url, {"reason": "paid by bank transfer"})
    staff_login(client, lifter)
    page = client.get(admin_change_url("billing_accounthold", hold.id))
    no_reason = client.post(url, {"reason": ""})
    lifted = client.post(url, {"reason": "Customer withdrew the dispute, ticket 41"})
    again = client.post(url, {"reason": "twice"})

    assert refused.status_code == 403
    assert url in page.content.decode()  # the "Lift hold…" button
    assert no_reason.status_code == 200 and "This field is required" in no_reason.content.decode()
    assert lifted.status_code == 302
    assert "already lifted" in again.content.decode()
    hold.refresh_from_db()
    assert (hold.lifted_by_id, hold.lift_reason) == (
        lifter.id,
        "Customer withdrew the dispute, ticket 41",
    )
    assert hold.lifted_at is not None
    assert not tenant_on_hold(topup.tenant_id)
    assert api.get("/api/v1/billing/balance").json()["on_hold"] is False


def test_admin_lists_open_disputes_with_links_to_the_account_and_top_up(
    paid, fake, deliver, client
):
    topup, charge = paid
    remote = fake.open_dispute(charge)
    deliver(_event(fake, "charge.dispute.created"))
    dispute = Dispute.objects.get()
    staff_login(client, make_operator())

    open_list = client.get("/admin/billing/dispute/?open=yes").content.decode()
    page = client.get(admin_change_url("billing_dispute", dispute.id))
    post = client.post(admin_change_url("billing_dispute", dispute.id), {"status": "won"})
    fake.close_dispute(remote["id"], "lost")
    deliver(_event(fake, "charge.dispute.closed"))
    closed_list = client.get("/admin/billing/dispute/?open=no").content.decode()
    still_open = client.get("/admin/billing/dispute/?open=yes").content.decode()

    assert dispute.id in open_list
    body = page.content.decode()
    assert admin_change_url("accounts_tenant", topup.tenant_id) in body
    assert admin_change_url("billing_topup", topup.id) in body
    assert 'name="_save"' not in body
    assert post.status_code == 403
    assert dispute.id in closed_list and dispute.id not in still_open
    assert Dispute.objects.get().status == "lost"


def test_a_dispute_that_names_only_the_charge_finds_the_top_up_through_stripe(paid, fake):
    topup, charge = paid
    remote = fake.open_dispute(charge)

    dispute = dispute_apply(
        remote=stripe_gateway.Dispute(
            id=remote["id"],
            status="needs_response",
            amount=10_000,
            currency="cny",
            reason="fraudulent",
            charge=charge,
            payment_intent=None,
            livemode=False,
        ),
        event_id="evt_by_charge",
        event_type="charge.dispute.created",
    )

    assert dispute is not None and dispute.topup_id == topup.id
    topup.refresh_from_db()
    assert topup.charge_id == charge
    assert [r["path"] for r in fake.requests][-1] == f"/v1/charges/{charge}"
    assert _balances(topup) == (0, 1_000, 0, 1_000)


def test_concurrent_deliveries_of_a_dispute_debit_once(transactional_db, fake, client_for):
    from django.test import Client

    from tests.conftest import run_threads

    user = make_user()
    response = client_for(user).post(
        "/api/v1/billing/topups", {"amount_fen": 10_000}, format="json"
    )
    topup = TopUp.objects.get(pk=response.json()["id"])
    fake.pay(topup.checkout_session_id)

    def post(record):
        return Client().generic(
            "POST",
            "/webhooks/stripe",
            record.body,
            content_type="application/json",
            HTTP_STRIPE_SIGNATURE=sign(record.body, SECRET),
        )

    assert post(_event(fake, "checkout.session.completed")).status_code == 200
    charge = fake.payment_intent(TopUp.objects.get(pk=topup.pk).payment_intent_id)["latest_charge"]
    fake.open_dispute(charge)
    events = [
        _event(fake, "charge.dispute.created"),
        _event(fake, "charge.dispute.funds_withdrawn"),
    ]

    results = run_threads(12, lambda i: post(events[i % 2]).status_code)

    assert results == [200] * 12
    assert Dispute.objects.count() == 1 and AccountHold.objects.count() == 1
    assert _kinds(topup, TransactionKind.CHARGEBACK).count() == 1
    assert _balances(topup) == (0, 1_000, 0, 1_000)
    assert not StripeEvent.objects.filter(processed_at__isnull=True).exists()
    assert len(_operator_mails()) == 1


def test_the_billing_page_says_what_is_owed_and_that_orders_are_paused(
    paid, fake, deliver, client, renter
):
    user, _api = renter
    topup, charge = paid
    _spend(topup, 5_000)
    client.force_login(user)
    before = client.get("/billing/").content.decode()
    fake.open_dispute(charge)
    deliver(_event(fake, "charge.dispute.created"))

    page = client.get("/billing/").content.decode()

    assert 'id="account-hold"' not in before
    assert 'id="account-hold"' in page
    assert "You owe ¥50.00" in page and "Contact support to lift the hold" in page
    assert "-¥50.00" in page  # the balance, net of what is owed
