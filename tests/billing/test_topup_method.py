"""A top-up may ask for one way to pay (`payment_method`, what `starverse topup --method`
sends): its checkout page then offers only that one, among those the operator enabled."""

import pytest

from billing.choices import TopUpStatus
from billing.models import TopUp
from billing.payments import topup_refresh
from tests.factories import make_user


@pytest.fixture
def renter(db, client_for, payments):
    return client_for(make_user())


def test_a_chosen_method_is_the_only_one_the_checkout_offers(renter, payments):
    response = renter.post(
        "/api/v1/billing/topups", {"amount_fen": 5_000, "payment_method": "alipay"}, format="json"
    )
    assert response.status_code == 201, response.content
    topup = TopUp.objects.get(pk=response.json()["id"])
    session = payments.session(topup.checkout_session_id)
    assert session["payment_method_types"] == ["alipay"]
    assert not session["payment_method_options"]  # WeChat Pay's option only when it is offered


def test_wechat_pay_keeps_its_web_client_option(renter, payments):
    response = renter.post(
        "/api/v1/billing/topups",
        {"amount_fen": 5_000, "payment_method": "wechat_pay"},
        format="json",
    )
    assert response.status_code == 201, response.content
    session = payments.session(TopUp.objects.get().checkout_session_id)
    assert session["payment_method_types"] == ["wechat_pay"]
    assert session["payment_method_options"] == {"wechat_pay": {"client": "web"}}


def test_a_method_the_operator_did_not_enable_is_a_400_and_nothing_is_opened(
    renter, payments, settings
):
    settings.STRIPE_PAYMENT_METHODS = ["card"]
    response = renter.post(
        "/api/v1/billing/topups", {"amount_fen": 5_000, "payment_method": "alipay"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "payment_method_unavailable"
    assert "alipay" in response.json()["detail"] and "card" in response.json()["detail"]
    assert TopUp.objects.count() == 0
    assert payments.sessions == []


def test_an_unknown_method_is_a_400_naming_the_field(renter, payments):
    response = renter.post(
        "/api/v1/billing/topups", {"amount_fen": 5_000, "payment_method": "paypal"}, format="json"
    )
    assert response.status_code == 400
    assert "payment_method" in response.json()["errors"]
    assert TopUp.objects.count() == 0


@pytest.mark.parametrize(
    ("method", "description", "label"),
    [
        ("alipay", "Top-up (Alipay)", "Alipay"),
        ("wechat_pay", "Top-up (WeChat Pay)", "WeChat Pay"),
        ("card", "Top-up (card)", "Card"),
        ("async", "Top-up", "Online payment"),  # a method Stripe names that we do not
    ],
)
def test_the_method_a_topup_was_paid_with_is_recorded_from_stripe(
    renter, payments, method, description, label
):
    response = renter.post("/api/v1/billing/topups", {"amount_fen": 5_000}, format="json")
    topup = TopUp.objects.get(pk=response.json()["id"])
    payments.pay(topup.checkout_session_id, method=method)
    if method == "async":
        payments.async_result(topup.checkout_session_id, "succeeded")

    topup = topup_refresh(topup=topup)  # the success page's path; the webhook's is the same

    assert topup.status == TopUpStatus.PAID
    assert topup.paid_with == ("" if method == "async" else method)
    assert topup.method_display() == label
    assert topup.ledger_transaction is not None
    assert topup.ledger_transaction.description == description
