"""A top-up left awaiting payment can be resumed (the same Stripe Checkout page, while its
session is open) or cancelled (its session expired at Stripe, the top-up marked cancelled, once
and audited); a session Stripe expires on its own marks the top-up expired."""

import pytest

from billing.choices import TopUpStatus
from billing.models import TopUp
from starverse.accounts.models import AuditEvent
from tests.factories import make_user

SECRET = "whsec_suite_secret"


@pytest.fixture
def fake(payments, settings):
    payments.webhook_secret, payments.deliver_webhooks = SECRET, False
    settings.STRIPE_WEBHOOK_SECRETS = [SECRET]
    return payments


@pytest.fixture
def renter(db, client):
    user = make_user()
    client.force_login(user)
    return user, client


def _pending(client):
    response = client.post("/billing/topup/", {"amount": "100"})
    assert response.status_code == 302
    topup = TopUp.objects.get()
    assert response["Location"] == topup.checkout_url
    return topup


def _deliver(client, record):
    from devstack.stripe import sign

    return client.generic(
        "POST",
        "/webhooks/stripe",
        record.body,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=sign(record.body, SECRET),
    )


def test_resume_goes_back_to_the_same_checkout_page(renter, fake):
    _user, client = renter
    topup = _pending(client)

    response = client.get(f"/billing/topups/{topup.id}/resume/")

    assert response.status_code == 302
    assert (
        response["Location"] == topup.checkout_url == f"{fake.url}/pay/{topup.checkout_session_id}"
    )
    page = client.get("/billing/")
    assert f'href="/billing/topups/{topup.id}/resume/"'.encode() in page.content
    assert f'action="/billing/topups/{topup.id}/cancel/"'.encode() in page.content


def test_cancel_expires_the_session_at_stripe_once_and_audits_it(
    renter, fake, django_capture_on_commit_callbacks
):
    user, client = renter
    topup = _pending(client)

    responses = [client.post(f"/billing/topups/{topup.id}/cancel/") for _ in range(2)]

    assert [r.status_code for r in responses] == [302, 302]
    topup.refresh_from_db()
    assert topup.status == TopUpStatus.CANCELLED
    session = fake.session(topup.checkout_session_id)
    assert (session["status"], session["url"]) == ("expired", None)
    expires = [r for r in fake.requests if r["path"].endswith("/expire")]
    assert len(expires) == 1
    assert expires[0]["idempotency_key"] == f"expire:{topup.checkout_session_id}"
    audited = AuditEvent.objects.filter(object_id=topup.pk).order_by("at")
    assert [(e.action, e.actor_id) for e in audited] == [
        ("topup.created", user.pk),
        ("topup.cancelled", user.pk),
    ]
    # Stripe's webhook about the expiry changes nothing more
    [expired] = [r for r in fake.events if r.type == "checkout.session.expired"]
    with django_capture_on_commit_callbacks(execute=True):
        assert _deliver(client, expired).status_code == 200
    topup.refresh_from_db()
    assert topup.status == TopUpStatus.CANCELLED
    assert AuditEvent.objects.filter(object_id=topup.pk).count() == 2
    page = client.get("/billing/")
    assert f"/billing/topups/{topup.id}/resume/".encode() not in page.content
    # and the page can no longer be paid
    resumed = client.get(f"/billing/topups/{topup.id}/resume/")
    assert resumed["Location"] == "/billing/"


def test_a_paid_topup_cannot_be_cancelled(renter, fake):
    _user, client = renter
    topup = _pending(client)
    fake.pay(topup.checkout_session_id, "alipay")

    response = client.post(f"/billing/topups/{topup.id}/cancel/", follow=True)

    topup.refresh_from_db()
    assert topup.status == TopUpStatus.PAID  # Stripe's answer settled it instead
    assert "This top-up is Paid; only one awaiting payment can be cancelled." in (
        response.content.decode()
    )
    assert fake.session(topup.checkout_session_id)["status"] == "complete"


def test_another_tenants_topup_is_a_404_and_nothing_changes(renter, fake, client):
    _user, owner = renter
    topup = _pending(owner)
    other = make_user()
    owner.force_login(other)

    assert owner.post(f"/billing/topups/{topup.id}/cancel/").status_code == 404
    assert owner.get(f"/billing/topups/{topup.id}/resume/").status_code == 404
    topup.refresh_from_db()
    assert topup.status == TopUpStatus.PENDING
    assert fake.session(topup.checkout_session_id)["status"] == "open"


def test_a_session_stripe_expires_marks_the_topup_expired_audited(
    renter, fake, django_capture_on_commit_callbacks
):
    _user, client = renter
    topup = _pending(client)
    fake.advance_clock(31 * 60)  # past the checkout's 30 minutes: Stripe expires it

    [expired] = [r for r in fake.events if r.type == "checkout.session.expired"]
    with django_capture_on_commit_callbacks(execute=True):
        assert _deliver(client, expired).status_code == 200

    topup.refresh_from_db()
    assert topup.status == TopUpStatus.EXPIRED
    assert list(
        AuditEvent.objects.filter(object_id=topup.pk, action="topup.expired").values_list(
            "actor_id", flat=True
        )
    ) == [None]
