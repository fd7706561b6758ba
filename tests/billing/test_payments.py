import itertools
import json
import time

import pytest
from django.core import mail

from billing import payments, stripe_gateway, tasks
from billing.choices import RefundStatus, TopUpStatus, TransactionKind
from billing.models import LedgerTransaction, Refund, StripeEvent, TopUp, Wallet
from billing.services import ledger_post
from devstack.stripe import sign
from starverse.accounts.models import AuditEvent
from starverse.core.errors import Conflict, InsufficientBalance, InvalidInput
from tests.conftest import run_threads
from tests.factories import make_operator, make_user, staff_login

SECRET = "whsec_suite_secret"


@pytest.fixture
def fake(payments, settings):
    # tests deliver events themselves, in the order they choose
    payments.webhook_secret, payments.deliver_webhooks = SECRET, False
    settings.STRIPE_WEBHOOK_SECRETS = ["whsec_old_rotated_out", SECRET]
    return payments


def _topup(client, amount_fen=10_000):
    response = client.post("/api/v1/billing/topups", {"amount_fen": amount_fen}, format="json")
    assert response.status_code == 201, response.content
    return TopUp.objects.get(pk=response.json()["id"])


def _events(fake, event_type):
    return [record for record in fake.events if record.type == event_type]


def _deliver(client, record, *, secret=SECRET, body=None, timestamp=None, header=True):
    body = record.body if body is None else body
    extra = {"HTTP_STRIPE_SIGNATURE": sign(body, secret, timestamp)} if header else {}
    return client.generic(
        "POST", "/webhooks/stripe", body, content_type="application/json", **extra
    )


def _credits(topup):
    return LedgerTransaction.objects.filter(kind=TransactionKind.TOPUP, wallet=topup.wallet)


@pytest.fixture
def renter(db, client_for):
    user = make_user()
    return user, client_for(user)


def test_topup_opens_a_checkout_session_in_cny(renter, fake):
    user, client = renter

    topup = _topup(client, 10_000)

    session = fake.session(topup.checkout_session_id)
    assert topup.status == TopUpStatus.PENDING
    assert topup.checkout_url == f"{fake.url}/pay/{session['id']}"
    assert (session["amount_total"], session["currency"], session["mode"]) == (
        10_000,
        "cny",
        "payment",
    )
    assert session["metadata"] == {"topup_id": topup.id, "tenant_id": user.tenant_id}
    assert session["payment_method_types"] == ["card", "alipay", "wechat_pay"]
    assert 29 * 60 <= session["expires_at"] - time.time() <= 30 * 60
    creates = [r for r in fake.requests if r["path"] == "/v1/checkout/sessions"]
    assert creates[0]["idempotency_key"] == f"topup:{topup.id}"


@pytest.mark.parametrize("amount", [999, 1_000_001, 0, -5000])
def test_topup_out_of_bounds_is_a_400_naming_them(renter, fake, amount):
    _user, client = renter

    response = client.post("/api/v1/billing/topups", {"amount_fen": amount}, format="json")

    assert response.status_code == 400
    assert response.json()["detail"] == "Top-ups are between ¥10.00 and ¥10,000.00."
    assert TopUp.objects.count() == 0
    assert fake.sessions == []


def test_paid_webhook_credits_once_and_mails_a_receipt(
    renter, fake, client, django_capture_on_commit_callbacks
):
    user, api = renter
    topup = _topup(api)
    fake.pay(topup.checkout_session_id, method="alipay")
    [completed] = _events(fake, "checkout.session.completed")

    with django_capture_on_commit_callbacks(execute=True):
        responses = [_deliver(client, completed) for _ in range(5)]

    assert [r.status_code for r in responses] == [200] * 5
    assert [r.json()["duplicate"] for r in responses] == [False, True, True, True, True]
    topup.refresh_from_db()
    assert topup.status == TopUpStatus.PAID
    assert _credits(topup).count() == 1
    assert _credits(topup).get().idempotency_key == f"topup:{topup.checkout_session_id}"
    assert Wallet.objects.get(pk=topup.wallet_id).cash_fen == 10_000
    assert StripeEvent.objects.get().processed_at is not None
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == [user.email]
    assert "¥100.00" in mail.outbox[0].body and "充值" in mail.outbox[0].subject
    # the audit log has the request (its checkout) and, once, the money arriving
    audited = AuditEvent.objects.filter(object_id=topup.pk).order_by("at")
    assert [(e.action, e.actor_id, e.data) for e in audited] == [
        ("topup.created", user.pk, {"amount_fen": 10_000}),
        ("topup.paid", user.pk, {"amount_fen": 10_000}),
    ]


@pytest.mark.parametrize("order", list(itertools.permutations(["completed", "async", "page"])))
def test_every_order_of_webhooks_and_success_page_credits_once(
    renter, fake, client, order, django_capture_on_commit_callbacks
):
    _user, api = renter
    topup = _topup(api)
    fake.pay(topup.checkout_session_id, method="async")
    fake.async_result(topup.checkout_session_id, "succeeded")
    steps = {
        "completed": lambda: _deliver(client, _events(fake, "checkout.session.completed")[0]),
        "async": lambda: _deliver(
            client, _events(fake, "checkout.session.async_payment_succeeded")[0]
        ),
        "page": lambda: api.get(f"/api/v1/billing/topups/{topup.id}"),
    }

    with django_capture_on_commit_callbacks(execute=True):
        for step in order:
            assert steps[step]().status_code == 200

    assert _credits(topup).count() == 1
    assert Wallet.objects.get(pk=topup.wallet_id).cash_fen == 10_000
    assert len(mail.outbox) == 1


def test_async_payment_that_fails_credits_nothing(
    renter, fake, client, django_capture_on_commit_callbacks
):
    _user, api = renter
    topup = _topup(api)
    fake.pay(topup.checkout_session_id, method="async")
    fake.async_result(topup.checkout_session_id, "failed")

    with django_capture_on_commit_callbacks(execute=True):
        _deliver(client, _events(fake, "checkout.session.completed")[0])
    topup.refresh_from_db()
    assert topup.status == TopUpStatus.PROCESSING
    with django_capture_on_commit_callbacks(execute=True):
        _deliver(client, _events(fake, "checkout.session.async_payment_failed")[0])

    topup.refresh_from_db()
    assert topup.status == TopUpStatus.FAILED
    assert _credits(topup).count() == 0


def test_expired_session_marks_the_topup_expired(
    renter, fake, client, django_capture_on_commit_callbacks
):
    _user, api = renter
    topup = _topup(api)
    fake.expire(topup.checkout_session_id)

    with django_capture_on_commit_callbacks(execute=True):
        _deliver(client, _events(fake, "checkout.session.expired")[0])

    topup.refresh_from_db()
    assert topup.status == TopUpStatus.EXPIRED


def test_twenty_threads_posting_one_event_credit_once(transactional_db, fake, client_for):
    from django.test import Client

    user = make_user()
    topup = _topup(client_for(user))
    fake.pay(topup.checkout_session_id)
    [completed] = _events(fake, "checkout.session.completed")

    results = run_threads(20, lambda i: _deliver(Client(), completed).status_code)

    assert results == [200] * 20
    assert StripeEvent.objects.count() == 1
    assert _credits(topup).count() == 1
    assert Wallet.objects.get(pk=topup.wallet_id).cash_fen == 10_000


@pytest.mark.parametrize("tamper", ["wrong_secret", "stale", "changed_byte", "no_header"])
def test_bad_signatures_are_refused_and_store_nothing(
    renter, fake, client, tamper, django_capture_on_commit_callbacks
):
    _user, api = renter
    topup = _topup(api)
    fake.pay(topup.checkout_session_id)
    [completed] = _events(fake, "checkout.session.completed")
    body = completed.body
    kwargs: dict = {}
    if tamper == "wrong_secret":
        kwargs["secret"] = "whsec_attacker"
    elif tamper == "stale":
        kwargs["timestamp"] = int(time.time()) - 301
    elif tamper == "changed_byte":
        signed = sign(body, SECRET)
        body = body.replace('"amount_total": 10000', '"amount_total": 90000', 1)
        assert body != completed.body
        kwargs["header"] = False
        with django_capture_on_commit_callbacks(execute=True):
            response = client.generic(
                "POST",
                "/webhooks/stripe",
                body,
                content_type="application/json",
                HTTP_STRIPE_SIGNATURE=signed,
            )
    else:
        kwargs["header"] = False

    if tamper != "changed_byte":
        with django_capture_on_commit_callbacks(execute=True):
            response = _deliver(client, completed, **kwargs)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_signature"
    assert StripeEvent.objects.count() == 0
    assert _credits(topup).count() == 0


@pytest.mark.parametrize(("field", "value"), [("amount_fen", 20_000), ("currency", "usd")])
def test_mismatched_amount_or_currency_is_flagged_not_credited(
    renter, fake, client, field, value, django_capture_on_commit_callbacks
):
    _user, api = renter
    topup = _topup(api)
    TopUp.objects.filter(pk=topup.pk).update(**{field: value})
    fake.pay(topup.checkout_session_id)

    with django_capture_on_commit_callbacks(execute=True):
        _deliver(client, _events(fake, "checkout.session.completed")[0])

    topup.refresh_from_db()
    assert topup.status == TopUpStatus.REVIEW
    assert field.split("_")[0] in topup.review_reason
    assert _credits(topup).count() == 0
    assert Wallet.objects.get(pk=topup.wallet_id).cash_fen == 0


def test_crash_after_the_ledger_write_does_not_credit_twice_on_retry(
    renter, fake, client, django_capture_on_commit_callbacks
):
    _user, api = renter
    topup = _topup(api)
    fake.pay(topup.checkout_session_id)
    [completed] = _events(fake, "checkout.session.completed")
    with django_capture_on_commit_callbacks(execute=False):
        _deliver(client, completed)  # stored; its processing task never ran
    event = StripeEvent.objects.get()
    # The crash: the credit was written, then the worker died before marking the event.
    payments.topup_settle_from_session(
        stripe_gateway.checkout_session_retrieve(topup.checkout_session_id)
    )
    assert event.processed_at is None

    with django_capture_on_commit_callbacks(execute=True):
        payments.stripe_event_process(event_id=event.id)  # the retry
        payments.stripe_event_process(event_id=event.id)

    assert _credits(topup).count() == 1
    assert Wallet.objects.get(pk=topup.wallet_id).cash_fen == 10_000
    event.refresh_from_db()
    assert event.processed_at is not None and event.attempts == 1


def test_livemode_mismatch_is_refused(renter, fake, client):
    _user, api = renter
    topup = _topup(api)
    fake.pay(topup.checkout_session_id)
    record = _events(fake, "checkout.session.completed")[0]
    body = json.dumps({**json.loads(record.body), "livemode": True})

    response = client.generic(
        "POST",
        "/webhooks/stripe",
        body,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=sign(body, SECRET),
    )

    assert response.status_code == 400
    assert StripeEvent.objects.count() == 0


def test_provider_errors_are_retried_then_reported(renter, fake, settings):
    _user, api = renter
    settings.STRIPE_MAX_NETWORK_RETRIES = 2
    fake.inject_faults(status=500, count=2)
    assert _topup(api).status == TopUpStatus.PENDING  # the library retried with the same key

    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    fake.inject_faults(status=429, count=1)
    response = api.post("/api/v1/billing/topups", {"amount_fen": 5000}, format="json")

    assert response.status_code == 503
    assert "Nothing was charged" in response.json()["detail"]
    assert TopUp.objects.filter(status=TopUpStatus.FAILED).count() == 1


# --- refunds --------------------------------------------------------------------------------


@pytest.fixture
def paid_topup(renter, fake, client, django_capture_on_commit_callbacks):
    _user, api = renter
    topup = _topup(api, 10_000)
    fake.pay(topup.checkout_session_id)
    with django_capture_on_commit_callbacks(execute=True):
        _deliver(client, _events(fake, "checkout.session.completed")[0])
    topup.refresh_from_db()
    assert topup.status == TopUpStatus.PAID
    return topup


def _refund_events(fake, client, types, captured):
    with captured(execute=True):
        for record in [r for r in fake.events if r.type in types] * 2:  # each delivered twice
            assert _deliver(client, record).status_code == 200


def test_refund_reserves_then_settles_once(
    paid_topup, fake, client, django_capture_on_commit_callbacks
):
    operator = make_operator()

    refund = payments.refund_request(
        topup_id=paid_topup.id, amount_fen=6_000, reason="unused", actor=operator
    )
    wallet = Wallet.objects.get(pk=paid_topup.wallet_id)
    assert (refund.status, wallet.cash_fen, wallet.promo_fen) == (
        RefundStatus.PENDING,
        4_000,
        1_000,
    )
    assert fake.refund(refund.stripe_refund_id)["amount"] == 6_000
    fake.settle_refund(refund.stripe_refund_id, "succeeded")

    _refund_events(
        fake, client, {"refund.updated", "charge.refunded"}, django_capture_on_commit_callbacks
    )

    refund.refresh_from_db()
    wallet.refresh_from_db()
    assert refund.status == RefundStatus.SUCCEEDED and refund.settled_at is not None
    assert (wallet.cash_fen, wallet.promo_fen) == (4_000, 1_000)
    assert LedgerTransaction.objects.filter(kind=TransactionKind.REFUND).count() == 1
    assert LedgerTransaction.objects.filter(kind=TransactionKind.REVERSAL).count() == 0


def test_a_refund_the_provider_cannot_take_now_is_sent_again_in_a_minute(
    paid_topup, fake, monkeypatch, django_capture_on_commit_callbacks
):
    scheduled = []
    monkeypatch.setattr(
        tasks.submit_refund,
        "apply_async",
        lambda args, countdown: scheduled.append((args, countdown)),
    )
    fake.inject_faults(status=500, count=1)

    with django_capture_on_commit_callbacks(execute=True):
        refund = payments.refund_request(
            topup_id=paid_topup.id, amount_fen=6_000, reason="unused", actor=make_operator()
        )

    assert (refund.status, refund.stripe_refund_id) == (RefundStatus.PENDING, None)
    assert scheduled == [((refund.id,), 60)]
    assert Wallet.objects.get(pk=paid_topup.wallet_id).cash_fen == 4_000  # still reserved


def test_failed_refund_releases_the_reservation_once(
    paid_topup, fake, client, django_capture_on_commit_callbacks
):
    refund = payments.refund_request(
        topup_id=paid_topup.id, amount_fen=10_000, reason="unused", actor=make_operator()
    )
    fake.settle_refund(refund.stripe_refund_id, "failed")

    _refund_events(
        fake, client, {"refund.updated", "refund.failed"}, django_capture_on_commit_callbacks
    )

    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED
    assert Wallet.objects.get(pk=paid_topup.wallet_id).cash_fen == 10_000
    assert LedgerTransaction.objects.filter(kind=TransactionKind.REVERSAL).count() == 1
    # released money is refundable again
    again = payments.refund_request(
        topup_id=paid_topup.id, amount_fen=10_000, reason="retry", actor=make_operator()
    )
    assert again.status == RefundStatus.PENDING


def test_refund_limits(paid_topup, fake):
    operator = make_operator()

    with pytest.raises(InvalidInput, match=r"At most ¥100\.00"):
        payments.refund_request(
            topup_id=paid_topup.id, amount_fen=10_001, reason="x", actor=operator
        )
    ledger_post(
        wallet_id=paid_topup.wallet_id,
        key="usage:t:1",
        kind=TransactionKind.USAGE,
        amount_fen=-5_000,
        description="Usage",
    )  # ¥10 trial, then ¥40 of cash
    with pytest.raises(InsufficientBalance):
        payments.refund_request(
            topup_id=paid_topup.id, amount_fen=7_000, reason="x", actor=operator
        )
    with pytest.raises(InvalidInput, match="reason"):
        payments.refund_request(topup_id=paid_topup.id, amount_fen=100, reason=" ", actor=operator)
    assert Refund.objects.count() == 0


# --- operator postings ----------------------------------------------------------------------


def test_bank_transfer_credits_once_per_reference(db, django_capture_on_commit_callbacks):
    user, operator = make_user(), make_operator()
    wallet = Wallet.objects.get(tenant=user.tenant)

    with django_capture_on_commit_callbacks(execute=True):
        topup = payments.bank_transfer_post(
            wallet_id=wallet.id,
            amount_fen=2_000_000,
            payer="北京大学",
            reference="ICBC-20261129-001",
            reason="PO 7731",
            actor=operator,
        )
    with pytest.raises(Conflict, match="already posted"):
        payments.bank_transfer_post(
            wallet_id=wallet.id,
            amount_fen=2_000_000,
            payer="北京大学",
            reference="ICBC-20261129-001",
            reason="again",
            actor=operator,
        )

    wallet.refresh_from_db()
    txn = topup.ledger_transaction
    assert txn is not None
    assert wallet.cash_fen == 2_000_000
    assert (txn.kind, txn.created_by_id, txn.idempotency_key) == (
        "bank_transfer",
        operator.id,
        "bank:ICBC-20261129-001",
    )
    assert "北京大学" in txn.reason and "PO 7731" in txn.reason
    assert len(mail.outbox) == 1


def test_large_adjustments_need_a_second_operator(db, settings):
    settings.ADJUSTMENT_APPROVAL_THRESHOLD_FEN = 100_000
    wallet = Wallet.objects.get(tenant=make_user().tenant)
    first, second = make_operator(), make_operator()

    small = payments.adjustment_request(
        wallet_id=wallet.id, amount_fen=100_000, reason="sla", actor=first
    )
    large = payments.adjustment_request(
        wallet_id=wallet.id, amount_fen=100_001, reason="deal", actor=first
    )
    with pytest.raises(InvalidInput, match="second operator"):
        payments.adjustment_decide(request_id=large.id, approve=True, actor=first)
    wallet.refresh_from_db()
    assert (isinstance(small, LedgerTransaction), wallet.cash_fen) == (True, 100_000)

    decided = payments.adjustment_decide(request_id=large.id, approve=True, actor=second)
    with pytest.raises(Conflict):
        payments.adjustment_decide(request_id=large.id, approve=True, actor=second)

    wallet.refresh_from_db()
    assert wallet.cash_fen == 200_001
    assert decided.ledger_transaction is not None
    assert decided.ledger_transaction.idempotency_key == f"adj:{large.id}"
    assert decided.decided_by_id == second.id


def test_admin_refund_form(paid_topup, fake, client):
    staff_login(client, make_operator())
    url = f"/admin/billing/topup/{paid_topup.id}/refund/"

    too_much = client.post(url, {"amount": "100.01", "reason": "customer asked"})
    done = client.post(url, {"amount": "30", "reason": "customer asked"})

    assert "At most ¥100.00" in too_much.content.decode()
    assert done.status_code == 302
    refund = Refund.objects.get()
    assert refund.requested_by is not None
    assert (refund.amount_fen, refund.status, refund.requested_by.is_staff) == (
        3_000,
        "pending",
        True,
    )
    assert Wallet.objects.get(pk=paid_topup.wallet_id).cash_fen == 7_000


def test_a_refund_of_invoiced_money_warns_the_operator(paid_topup, fake, client):
    from billing.invoices import invoice_profile_save, invoice_request
    from tests.billing.test_invoices import PROFILE

    owner = paid_topup.created_by
    invoice_profile_save(tenant_id=paid_topup.tenant_id, data=PROFILE)
    invoice_request(user=owner, amount_fen=8_000)  # of ¥100 paid
    staff_login(client, make_operator())
    url = f"/admin/billing/topup/{paid_topup.id}/refund/"

    fits = client.post(url, {"amount": "20", "reason": "customer asked"}, follow=True)
    over = client.post(url, {"amount": "30", "reason": "customer asked"}, follow=True)

    assert "exceed what it paid" not in fits.content.decode()  # ¥80 invoiced of ¥80 left
    assert "now exceed what it paid by ¥30.00" in over.content.decode()  # of ¥50 left
    assert Refund.objects.count() == 2  # warned, not refused
