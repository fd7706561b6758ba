"""The local Stripe stand-in, driven through the real ``stripe`` library. No database needed."""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import stripe

from devstack.stripe import BANNER, StripeFake, StripeFakeError, format_amount
from devstack.stripe.forms import decode_form

SECRET = "whsec_test_fake_secret"
ROOT = Path(__file__).resolve().parents[2]


class Receiver:
    """A tiny webhook endpoint: records every POST, answers 500 to the first ``fail_first``."""

    def __init__(self) -> None:
        self.fail_first = 0
        self.received: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                with receiver.lock:
                    receiver.received.append({"headers": dict(self.headers), "body": body})
                    status = 500 if len(receiver.received) <= receiver.fail_first else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhooks/stripe"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def types(self) -> list[str]:
        with self.lock:
            return [json.loads(item["body"])["type"] for item in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(stripe_fake: StripeFake) -> StripeFake:
    """The session's fake, emptied, without a webhook endpoint."""
    return stripe_fake


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    endpoint = Receiver()
    yield endpoint
    endpoint.close()


@pytest.fixture
def hooked(stripe_fake: StripeFake, receiver: Receiver) -> StripeFake:
    """The session's fake, emptied, delivering webhooks to ``receiver`` signed with SECRET."""
    stripe_fake.webhook_url, stripe_fake.webhook_secret = receiver.url, SECRET
    return stripe_fake


def make_client(fake: StripeFake, retries: int = 0, key: str = "sk_test_123") -> Any:
    return stripe.StripeClient(key, base_addresses={"api": fake.url}, max_network_retries=retries)


def session_params(**overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "mode": "payment",
        "currency": "cny",
        "line_items": [
            {
                "price_data": {
                    "currency": "cny",
                    "unit_amount": 123456,
                    "product_data": {"name": "Starverse credit top-up"},
                },
                "quantity": 1,
            }
        ],
        "allowed_payment_method_types": ["card", "alipay", "wechat_pay"],
        "payment_method_options": {"wechat_pay": {"client": "web"}},
        "success_url": "http://127.0.0.1:8000/billing/return?session={CHECKOUT_SESSION_ID}",
        "cancel_url": "http://127.0.0.1:8000/billing/cancel",
        "client_reference_id": "top_x",
        "customer_email": "ada@example.com",
        "metadata": {"topup_id": "top_x", "tenant_id": "ten_1"},
    }
    params.update(overrides)
    return params


def create_session(fake: StripeFake, **overrides: Any) -> Any:
    return make_client(fake).v1.checkout.sessions.create(params=session_params(**overrides))


def paid_intent(fake: StripeFake) -> str:
    session = create_session(fake)
    return fake.pay(session.id, "card")["payment_intent"]


def _error_of(raised: stripe.StripeError) -> Any:
    """The `error` object of the JSON body that came with a raised Stripe error."""
    assert isinstance(raised.json_body, dict)
    return raised.json_body["error"]


def raw_request(
    fake: StripeFake, method: str, path: str, body: str = "", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    connection = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    connection.request(method, path, body=body.encode(), headers=headers or {})
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, text


# -- checkout sessions ---------------------------------------------------------------------


def test_create_session_answers_a_checkout_session_object(fake: StripeFake) -> None:
    before = int(time.time())
    session = create_session(fake)
    after = int(time.time())

    data = session.to_dict()
    assert data["id"].startswith("cs_test_")
    assert len(data["id"]) >= len("cs_test_") + 24
    assert before <= data["created"] <= after
    assert data["expires_at"] == data["created"] + 24 * 3600
    assert {k: v for k, v in data.items() if k not in {"id", "created", "expires_at"}} == {
        "object": "checkout.session",
        "amount_subtotal": 123456,
        "amount_total": 123456,
        "cancel_url": "http://127.0.0.1:8000/billing/cancel",
        "client_reference_id": "top_x",
        "currency": "cny",
        "customer_details": None,
        "customer_email": "ada@example.com",
        "livemode": False,
        "metadata": {"topup_id": "top_x", "tenant_id": "ten_1"},
        "mode": "payment",
        "payment_intent": None,
        "payment_method_options": {"wechat_pay": {"client": "web"}},
        "payment_method_types": ["card", "alipay", "wechat_pay"],
        "payment_status": "unpaid",
        "status": "open",
        "success_url": "http://127.0.0.1:8000/billing/return?session={CHECKOUT_SESSION_ID}",
        "url": f"{fake.url}/pay/{data['id']}",
    }
    assert isinstance(session, stripe.checkout.Session)


def test_defaults_and_explicit_expiry(fake: StripeFake) -> None:
    params = session_params(expires_at=int(time.time()) + 3600)
    del params["allowed_payment_method_types"], params["payment_method_options"]
    del params["client_reference_id"], params["customer_email"]
    session = make_client(fake).v1.checkout.sessions.create(params=params)
    assert session.payment_method_types == ["card"]
    assert session.expires_at == params["expires_at"]
    assert session.client_reference_id is None
    assert session.customer_email is None


def test_expanding_an_unpaid_sessions_intent_leaves_it_null(fake: StripeFake) -> None:
    created = create_session(fake)
    client = make_client(fake)
    fetched = client.v1.checkout.sessions.retrieve(
        created.id, params={"expand": ["payment_intent.latest_charge"]}
    )
    assert fetched.to_dict() == created.to_dict()


@pytest.mark.parametrize("method", ["card", "alipay", "wechat_pay"])
def test_expand_gives_the_intent_and_its_charge_saying_how_it_was_paid(
    fake: StripeFake, method: str
) -> None:
    created = create_session(fake)
    fake.pay(created.id, method)
    fetched = make_client(fake).v1.checkout.sessions.retrieve(
        created.id, params={"expand": ["payment_intent.latest_charge"]}
    )
    intent = fetched.to_dict()["payment_intent"]
    # as Stripe's: the intent lists what the session offered, its charge the method used
    assert intent["object"] == "payment_intent"
    assert intent["payment_method_types"] == ["card", "alipay", "wechat_pay"]
    assert intent["latest_charge"]["object"] == "charge"
    assert intent["latest_charge"]["payment_method_details"] == {"type": method}
    plain = make_client(fake).v1.checkout.sessions.retrieve(created.id)
    assert plain.payment_intent == intent["id"]  # not expanded unless asked


def test_expanding_what_cannot_be_expanded_is_a_400_naming_it(fake: StripeFake) -> None:
    created = create_session(fake)
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        make_client(fake).v1.checkout.sessions.retrieve(
            created.id, params={"expand": ["customer_email"]}
        )
    assert (excinfo.value.http_status, excinfo.value.param) == (400, "expand")
    assert _error_of(excinfo.value)["message"] == (
        "This property cannot be expanded (customer_email)."
    )


def test_expire_session_through_library(fake: StripeFake) -> None:
    created = create_session(fake)
    client = make_client(fake)
    expired = client.v1.checkout.sessions.expire(
        created.id, options={"idempotency_key": "expire-1"}
    )
    assert expired.status == "expired"
    assert expired.payment_status == "unpaid"
    assert expired.url is None
    assert client.v1.checkout.sessions.retrieve(created.id).status == "expired"

    (event,) = fake.events
    assert event.type == "checkout.session.expired"
    assert event.status == "not_sent"
    assert event.event["data"]["object"]["status"] == "expired"
    assert event.event["request"] == {
        "id": expired.last_response.request_id,
        "idempotency_key": "expire-1",
    }
    assert event.event["pending_webhooks"] == 0

    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        client.v1.checkout.sessions.expire(created.id)
    assert excinfo.value.http_status == 400
    assert excinfo.value.code == "checkout_session_not_open"


def test_unknown_session_is_resource_missing(fake: StripeFake) -> None:
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        make_client(fake).v1.checkout.sessions.retrieve("cs_test_nope")
    assert excinfo.value.http_status == 404
    assert excinfo.value.code == "resource_missing"
    assert excinfo.value.param == "id"
    assert excinfo.value.json_body == {
        "error": {
            "type": "invalid_request_error",
            "message": "No such checkout.session: 'cs_test_nope'",
            "param": "id",
            "code": "resource_missing",
        }
    }


def test_clock_advance_expires_open_sessions(fake: StripeFake) -> None:
    session = create_session(fake, expires_at=int(time.time()) + 1800)
    fake.advance_clock(1801)
    assert fake.session(session.id)["status"] == "expired"
    assert fake.event_types() == ["checkout.session.expired"]


# -- auth and validation -------------------------------------------------------------------


def test_wrong_key_raises_authentication_error(fake: StripeFake) -> None:
    with pytest.raises(stripe.AuthenticationError) as excinfo:
        make_client(fake, key="rk_wrong_123").v1.checkout.sessions.create(params=session_params())
    assert excinfo.value.http_status == 401
    assert _error_of(excinfo.value)["type"] == "invalid_request_error"
    assert _error_of(excinfo.value)["message"] == "Invalid API Key provided: rk_wrong****_123"

    with pytest.raises(stripe.AuthenticationError):
        make_client(fake, key="sk_live_123").v1.checkout.sessions.retrieve("cs_test_x")


def test_missing_key_is_401_in_stripe_shape(fake: StripeFake) -> None:
    status, _, body = raw_request(fake, "GET", "/v1/checkout/sessions/cs_test_x")
    assert status == 401
    assert json.loads(body)["error"]["type"] == "invalid_request_error"
    assert json.loads(body)["error"]["message"].startswith("You did not provide an API key.")


def test_live_key_accepted_only_in_livemode() -> None:
    with StripeFake(livemode=True) as live:
        session = create_session_with_key(live, "sk_live_abc")
        assert session.livemode is True
        assert session.id.startswith("cs_live_")


def create_session_with_key(fake: StripeFake, key: str) -> Any:
    return make_client(fake, key=key).v1.checkout.sessions.create(params=session_params())


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        ({"success_url": None}, "success_url", "Missing required param: success_url."),
        ({"mode": None}, "mode", "Missing required param: mode."),
        ({"currency": None}, "currency", "Missing required param: currency."),
        ({"line_items": None}, "line_items", "Missing required param: line_items."),
        ({"mode": "subscription"}, "mode", None),
        (
            {"allowed_payment_method_types": ["card", "paypal"]},
            "allowed_payment_method_types[1]",
            None,
        ),
        ({"payment_method_options": None}, "payment_method_options[wechat_pay][client]", None),
        ({"expires_at": 1}, "expires_at", None),
        ({"expires_at": int(time.time()) + 25 * 3600}, "expires_at", None),
        ({"customer": "cus_1"}, "customer", "Received unknown parameter: customer"),
        ({"cancel_url": "not a url"}, "cancel_url", "Not a valid URL"),
    ],
)
def test_invalid_session_params_name_the_param(
    fake: StripeFake, change: dict[str, Any], param: str, message: str | None
) -> None:
    params = session_params(**change)
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        make_client(fake).v1.checkout.sessions.create(params=params)
    assert excinfo.value.http_status == 400
    assert excinfo.value.param == param
    if message is not None:
        assert excinfo.value.user_message == message


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({"price_data": {"currency": "cny", "unit_amount": 0, "product_data": {"name": "x"}}},
         "line_items[0][price_data][unit_amount]"),
        ({"price_data": {"currency": "cny", "unit_amount": 5, "product_data": {"name": "x"}}},
         "line_items[0][quantity]"),
        ({"price_data": {"currency": "usd", "unit_amount": 5, "product_data": {"name": "x"}},
          "quantity": 1}, "line_items[0][price_data][currency]"),
        ({"price_data": {"currency": "cny", "unit_amount": 5, "product_data": {}},
          "quantity": 1}, "line_items[0][price_data][product_data]"),
        ({"price": "price_123", "quantity": 1}, "line_items[0][price]"),
    ],
)  # fmt: skip
def test_invalid_line_items_name_the_param(
    fake: StripeFake, item: dict[str, Any], param: str
) -> None:
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        create_session(fake, line_items=[item])
    assert excinfo.value.param == param


def test_the_removed_payment_method_types_is_refused_at_endive_and_named_before_it(
    fake: StripeFake,
) -> None:
    # the library pins an endive API version: the parameter it removed is refused, as Stripe does
    old = session_params(payment_method_types=["alipay"])
    del old["allowed_payment_method_types"]
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        make_client(fake).v1.checkout.sessions.create(params=old)
    assert (excinfo.value.http_status, excinfo.value.param) == (400, "payment_method_types")
    assert "allowed_payment_method_types" in (excinfo.value.user_message or "")
    # an account on an older version names its methods the old way
    answer = requests.post(
        f"{fake.url}/v1/checkout/sessions",
        data={
            "mode": "payment",
            "currency": "cny",
            "line_items[0][price_data][currency]": "cny",
            "line_items[0][price_data][unit_amount]": "100",
            "line_items[0][price_data][product_data][name]": "x",
            "line_items[0][quantity]": "1",
            "payment_method_types[0]": "alipay",
            "success_url": "http://127.0.0.1/ok",
            "cancel_url": "http://127.0.0.1/no",
        },
        headers={"Authorization": "Bearer sk_test_123", "Stripe-Version": "2024-06-20"},
        timeout=5,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["payment_method_types"] == ["alipay"]


def test_form_decoding_builds_nested_dicts_and_lists() -> None:
    body = (
        "line_items[0][price_data][unit_amount]=10000&line_items[0][quantity]=1"
        "&payment_method_types[0]=card&payment_method_types[1]=alipay"
        "&metadata[topup_id]=top_x&expand[]=a&expand[]=b&mode=payment"
    )
    assert decode_form(body) == {
        "line_items": [{"price_data": {"unit_amount": "10000"}, "quantity": "1"}],
        "payment_method_types": ["card", "alipay"],
        "metadata": {"topup_id": "top_x"},
        "expand": ["a", "b"],
        "mode": "payment",
    }


# -- idempotency ---------------------------------------------------------------------------


def test_idempotent_replay_returns_the_same_session(fake: StripeFake) -> None:
    sessions = make_client(fake).v1.checkout.sessions
    first = sessions.create(params=session_params(), options={"idempotency_key": "topup:top_x"})
    again = sessions.create(params=session_params(), options={"idempotency_key": "topup:top_x"})
    assert again.id == first.id
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.last_response.headers
    assert again.last_response.headers["Original-Request"] == first.last_response.request_id
    assert len(fake.sessions) == 1

    with pytest.raises(stripe.IdempotencyError) as excinfo:
        sessions.create(
            params=session_params(metadata={"topup_id": "other"}),
            options={"idempotency_key": "topup:top_x"},
        )
    assert excinfo.value.http_status == 400
    assert _error_of(excinfo.value)["type"] == "idempotency_error"


def test_idempotency_key_is_scoped_to_the_path(fake: StripeFake) -> None:
    session = create_session(fake)
    sessions = make_client(fake).v1.checkout.sessions
    sessions.create(params=session_params(), options={"idempotency_key": "k"})
    with pytest.raises(stripe.IdempotencyError):
        sessions.expire(session.id, options={"idempotency_key": "k"})


# -- payments and webhooks -----------------------------------------------------------------


def test_pay_delivers_a_signed_completed_event(hooked: StripeFake, receiver: Receiver) -> None:
    session = create_session(hooked)
    paid = hooked.pay(session.id, "alipay")
    assert paid["status"] == "complete"
    assert paid["payment_status"] == "paid"
    assert paid["payment_intent"].startswith("pi_test_")
    assert paid["url"] is None
    assert hooked.wait_for_webhooks(5)

    (delivery,) = receiver.received
    assert delivery["headers"]["Content-Type"].startswith("application/json")
    event = stripe.Webhook.construct_event(
        delivery["body"], delivery["headers"]["Stripe-Signature"], SECRET
    )
    assert event.type == "checkout.session.completed"
    assert event.id.startswith("evt_test_")
    assert event.api_version == "2024-06-20"
    assert event.pending_webhooks == 1
    assert event.request.to_dict() == {"id": None, "idempotency_key": None}
    assert event.data.object.id == session.id
    assert event.data.object.payment_status == "paid"
    assert event.data.object.metadata.to_dict() == {"topup_id": "top_x", "tenant_id": "ten_1"}

    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(
            delivery["body"], delivery["headers"]["Stripe-Signature"], "whsec_wrong"
        )
    (record,) = hooked.events
    assert record.status == "delivered"
    assert [attempt.status_code for attempt in record.attempts] == [200]

    intent = make_client(hooked).v1.payment_intents.retrieve(paid["payment_intent"])
    assert intent.status == "succeeded"
    assert intent.amount_received == 123456
    with pytest.raises(StripeFakeError):
        hooked.pay(session.id, "card")


def test_async_payment_success_sequence(hooked: StripeFake, receiver: Receiver) -> None:
    session = create_session(hooked)
    pending = hooked.pay(session.id, "async")
    assert (pending["status"], pending["payment_status"]) == ("complete", "unpaid")
    assert hooked.payment_intent(pending["payment_intent"])["status"] == "processing"

    settled = hooked.async_result(session.id, "succeeded")
    assert settled["payment_status"] == "paid"
    assert hooked.wait_for_webhooks(5)
    assert receiver.types() == [
        "checkout.session.completed",
        "checkout.session.async_payment_succeeded",
    ]
    first, second = (json.loads(item["body"]) for item in receiver.received)
    assert first["data"]["object"]["payment_status"] == "unpaid"
    assert second["data"]["object"]["payment_status"] == "paid"
    with pytest.raises(StripeFakeError):
        hooked.async_result(session.id, "failed")


def test_async_payment_failure_sequence(hooked: StripeFake, receiver: Receiver) -> None:
    session = create_session(hooked)
    intent_id = hooked.pay(session.id, "async")["payment_intent"]
    failed = hooked.async_result(session.id, "failed")
    assert (failed["status"], failed["payment_status"]) == ("complete", "unpaid")
    assert hooked.payment_intent(intent_id)["status"] == "requires_payment_method"
    assert hooked.wait_for_webhooks(5)
    assert receiver.types() == [
        "checkout.session.completed",
        "checkout.session.async_payment_failed",
    ]
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        make_client(hooked).v1.refunds.create(params={"payment_intent": intent_id})
    assert excinfo.value.code == "charge_not_refundable"


def test_paying_an_expired_session_fails(fake: StripeFake) -> None:
    session = create_session(fake)
    fake.expire(session.id)
    with pytest.raises(StripeFakeError) as excinfo:
        fake.pay(session.id)
    assert excinfo.value.code == "checkout_session_expired"
    with pytest.raises(StripeFakeError) as excinfo:
        fake.pay(create_session(fake).id, "bitcoin")
    assert excinfo.value.param == "method"


def test_webhook_retries_until_the_receiver_answers_200(
    hooked: StripeFake, receiver: Receiver
) -> None:
    receiver.fail_first = 2
    session = create_session(hooked)
    hooked.pay(session.id)
    assert hooked.wait_for_webhooks(5)
    (record,) = hooked.events
    assert record.status == "delivered"
    assert [attempt.status_code for attempt in record.attempts] == [500, 500, 200]
    assert len(receiver.received) == 3
    bodies = {item["body"] for item in receiver.received}
    assert bodies == {record.body}
    for item in receiver.received:
        stripe.Webhook.construct_event(item["body"], item["headers"]["Stripe-Signature"], SECRET)


def test_webhook_gives_up_after_five_retries_and_records_errors(receiver: Receiver) -> None:
    receiver.fail_first = 100
    with StripeFake(
        webhook_url=receiver.url, webhook_secret=SECRET, webhook_retry_delays=(0.01,) * 5
    ) as fake:
        fake.pay(create_session(fake).id)
        assert fake.wait_for_webhooks(5)
        (record,) = fake.events
        assert record.status == "failed"
        assert [attempt.status_code for attempt in record.attempts] == [500] * 6

    with StripeFake(webhook_url="http://127.0.0.1:9/nothing", webhook_retry_delays=(0.01,)) as f:
        f.pay(create_session(f).id)
        assert f.wait_for_webhooks(5)
        (record,) = f.events
        assert record.status == "failed"
        assert [attempt.status_code for attempt in record.attempts] == [None, None]
        assert record.attempts[0].error is not None
        assert record.attempts[0].error.startswith("URLError")


def test_delivery_off_records_events_for_the_test_to_post(
    hooked: StripeFake, receiver: Receiver
) -> None:
    hooked.deliver_webhooks = False
    session = create_session(hooked)
    hooked.pay(session.id)
    assert hooked.wait_for_webhooks(1)
    assert receiver.received == []
    (record,) = hooked.events
    assert record.status == "not_sent"
    assert record.event["pending_webhooks"] == 0
    header = hooked.signature_header(record.body)
    event = stripe.Webhook.construct_event(record.body, header, SECRET)
    assert event.data.object.id == session.id

    resent = hooked.resend(record.id)
    assert resent.status == "pending"
    assert hooked.wait_for_webhooks(5)
    assert receiver.types() == ["checkout.session.completed"]
    assert hooked.events[0].status == "delivered"


# -- refunds -------------------------------------------------------------------------------


def test_refund_pending_then_succeeded(hooked: StripeFake, receiver: Receiver) -> None:
    intent_id = paid_intent(hooked)
    client = make_client(hooked)
    refund = client.v1.refunds.create(
        params={
            "payment_intent": intent_id,
            "amount": 23456,
            "metadata": {"refund_id": "rf_1"},
            "reason": "requested_by_customer",
        },
        options={"idempotency_key": "refund:rf_1"},
    )
    assert refund.id.startswith("re_test_")
    assert (refund.object, refund.status, refund.amount) == ("refund", "pending", 23456)
    assert (refund.currency, refund.payment_intent) == ("cny", intent_id)
    assert refund.metadata.to_dict() == {"refund_id": "rf_1"}
    assert refund.reason == "requested_by_customer"

    settled = hooked.settle_refund(refund.id, "succeeded")
    assert settled["status"] == "succeeded"
    assert client.v1.refunds.retrieve(refund.id).status == "succeeded"
    assert hooked.wait_for_webhooks(5)
    assert receiver.types() == [
        "checkout.session.completed",
        "refund.created",
        "refund.updated",
        "charge.refunded",
    ]
    events = [json.loads(item["body"]) for item in receiver.received]
    assert events[1]["request"]["idempotency_key"] == "refund:rf_1"
    assert events[2]["data"]["previous_attributes"] == {"status": "pending"}
    charge = events[3]["data"]["object"]
    assert charge["object"] == "charge"
    assert charge["payment_intent"] == intent_id
    assert charge["amount_refunded"] == 23456
    assert charge["refunded"] is False
    assert charge["refunds"]["total_count"] == 1
    assert charge["refunds"]["data"][0]["id"] == refund.id
    assert charge["refunds"]["data"][0]["status"] == "succeeded"
    with pytest.raises(StripeFakeError):
        hooked.settle_refund(refund.id, "failed")


def test_refund_over_the_refundable_amount_is_refused(fake: StripeFake) -> None:
    intent_id = paid_intent(fake)
    refunds = make_client(fake).v1.refunds
    refunds.create(params={"payment_intent": intent_id, "amount": 100000})
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        refunds.create(params={"payment_intent": intent_id, "amount": 23457})
    assert excinfo.value.param == "amount"
    assert excinfo.value.code == "amount_too_large"
    rest = refunds.create(params={"payment_intent": intent_id})
    assert rest.amount == 23456
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        refunds.create(params={"payment_intent": intent_id, "amount": 1})
    assert excinfo.value.code == "charge_already_refunded"


def test_failed_refund_makes_the_amount_refundable_again(hooked: StripeFake) -> None:
    intent_id = paid_intent(hooked)
    refunds = make_client(hooked).v1.refunds
    refund = refunds.create(params={"payment_intent": intent_id, "amount": 123456})
    with pytest.raises(stripe.InvalidRequestError):
        refunds.create(params={"payment_intent": intent_id, "amount": 1})
    failed = hooked.settle_refund(refund.id, "failed")
    assert (failed["status"], failed["failure_reason"]) == ("failed", "unknown")
    assert hooked.event_types()[-2:] == ["refund.updated", "refund.failed"]
    again = refunds.create(params={"payment_intent": intent_id, "amount": 123456})
    assert again.status == "pending"


def test_refund_errors_for_unknown_intents_and_refunds(fake: StripeFake) -> None:
    refunds = make_client(fake).v1.refunds
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        refunds.create(params={"payment_intent": "pi_test_nope"})
    assert (excinfo.value.http_status, excinfo.value.param) == (404, "payment_intent")
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        refunds.retrieve("re_test_nope")
    assert excinfo.value.code == "resource_missing"
    with pytest.raises(stripe.InvalidRequestError) as excinfo:
        refunds.create(params={"amount": 5})
    assert excinfo.value.param == "payment_intent"


# -- disputes and dashboard refunds --------------------------------------------------------


def paid_charge(fake: StripeFake) -> str:
    return str(fake.payment_intent(paid_intent(fake))["latest_charge"])


def test_dispute_withdraws_then_a_won_dispute_reinstates(
    hooked: StripeFake, receiver: Receiver
) -> None:
    charge_id = paid_charge(hooked)

    opened = hooked.open_dispute(charge_id, reason="fraudulent")
    closed = hooked.close_dispute(opened["id"], "won")

    assert opened["id"].startswith("dp_test_")
    assert (opened["status"], opened["amount"], opened["currency"]) == (
        "needs_response",
        123456,
        "cny",
    )
    assert (opened["charge"], opened["reason"]) == (charge_id, "fraudulent")
    assert opened["payment_intent"] == hooked.charge(charge_id)["payment_intent"]
    assert closed["status"] == "won"
    assert [(t["amount"], t["reporting_category"]) for t in closed["balance_transactions"]] == [
        (-123456, "dispute"),
        (123456, "dispute_reversal"),
    ]
    retrieved = make_client(hooked).v1.disputes.retrieve(opened["id"])
    assert (retrieved.status, retrieved.charge) == ("won", charge_id)
    assert hooked.charge(charge_id)["disputed"] is True
    assert hooked.wait_for_webhooks(5)
    assert receiver.types() == [
        "checkout.session.completed",
        "charge.dispute.created",
        "charge.dispute.funds_withdrawn",
        "charge.dispute.funds_reinstated",
        "charge.dispute.closed",
    ]
    objects = [json.loads(item["body"])["data"]["object"] for item in receiver.received[1:]]
    assert [o["status"] for o in objects] == ["needs_response", "needs_response", "won", "won"]


def test_a_lost_dispute_and_an_inquiry(fake: StripeFake) -> None:
    lost = fake.open_dispute(paid_charge(fake), 100_000, reason="product_not_received")
    fake.close_dispute(lost["id"], "lost")
    inquiry = fake.open_dispute(paid_charge(fake), inquiry=True)
    closed = fake.close_dispute(inquiry["id"], "won")

    assert fake.dispute(lost["id"])["status"] == "lost"
    assert fake.dispute(lost["id"])["amount"] == 100_000
    assert (inquiry["status"], closed["status"], closed["balance_transactions"]) == (
        "warning_needs_response",
        "warning_closed",
        [],
    )
    assert [t for t in fake.event_types() if t.startswith("charge.dispute.")] == [
        "charge.dispute.created",
        "charge.dispute.funds_withdrawn",
        "charge.dispute.closed",
        "charge.dispute.created",
        "charge.dispute.closed",
    ]
    with pytest.raises(StripeFakeError, match="already closed"):
        fake.close_dispute(lost["id"], "won")
    with pytest.raises(StripeFakeError, match="already disputed"):
        fake.open_dispute(lost["charge"])
    with pytest.raises(StripeFakeError, match="Invalid reason"):
        fake.open_dispute(paid_charge(fake), reason="bored")
    with pytest.raises(StripeFakeError, match="No such charge"):
        fake.open_dispute("ch_test_nope")


def test_a_dashboard_refund_has_no_metadata_and_succeeds_at_once(
    hooked: StripeFake, receiver: Receiver
) -> None:
    charge_id = paid_charge(hooked)

    refund = hooked.refund_in_dashboard(charge_id, 23_456)
    pending = hooked.refund_in_dashboard(charge_id, 100_000, pending=True)

    assert (refund["status"], refund["metadata"], refund["charge"]) == ("succeeded", {}, charge_id)
    assert pending["status"] == "pending"
    assert hooked.charge(charge_id)["amount_refunded"] == 23_456
    with pytest.raises(StripeFakeError, match="already been refunded"):
        hooked.refund_in_dashboard(charge_id, 1)
    hooked.settle_refund(pending["id"], "succeeded")
    assert hooked.charge(charge_id)["refunded"] is True
    assert hooked.wait_for_webhooks(5)
    assert receiver.types() == [
        "checkout.session.completed",
        "refund.created",
        "charge.refunded",
        "refund.created",
        "refund.updated",
        "charge.refunded",
    ]


def test_dispute_and_dashboard_refund_control_endpoints(fake: StripeFake) -> None:
    charge_id = paid_charge(fake)

    status, _, body = raw_request(
        fake, "POST", f"/_fake/charges/{charge_id}/refund", "amount=456&pending=true"
    )
    assert (status, json.loads(body)["amount"], json.loads(body)["status"]) == (
        200,
        456,
        "pending",
    )
    status, _, body = raw_request(
        fake, "POST", f"/_fake/charges/{charge_id}/dispute", "reason=duplicate&amount=1000"
    )
    dispute = json.loads(body)
    assert (status, dispute["reason"], dispute["amount"]) == (200, "duplicate", 1000)
    status, _, body = raw_request(
        fake, "POST", f"/_fake/disputes/{dispute['id']}/close?outcome=lost"
    )
    assert (status, json.loads(body)["status"]) == (200, "lost")
    status, _, body = raw_request(fake, "POST", "/_fake/charges/ch_test_nope/dispute")
    assert (status, json.loads(body)["error"]["type"]) == (404, "invalid_request_error")


# -- fault injection -----------------------------------------------------------------------


def test_injected_500_surfaces_without_retries(fake: StripeFake) -> None:
    fake.inject_faults(status=500, count=1)
    with pytest.raises(stripe.APIError) as excinfo:
        create_session(fake)
    assert excinfo.value.http_status == 500
    assert _error_of(excinfo.value)["type"] == "api_error"
    assert create_session(fake).status == "open"


def test_injected_500s_are_retried_by_the_library_with_the_same_key(fake: StripeFake) -> None:
    fake.inject_faults(status=500, count=2)
    session = make_client(fake, retries=2).v1.checkout.sessions.create(params=session_params())
    assert session.status == "open"
    posts = [r for r in fake.requests if r["path"] == "/v1/checkout/sessions"]
    assert [r["status"] for r in posts] == [500, 500, 200]
    assert len({r["idempotency_key"] for r in posts}) == 1
    assert len(fake.sessions) == 1


def test_injected_429_is_a_rate_limit_error_the_library_does_not_retry(fake: StripeFake) -> None:
    fake.inject_faults(status=429, count=1)
    with pytest.raises(stripe.RateLimitError) as excinfo:
        make_client(fake, retries=2).v1.checkout.sessions.create(params=session_params())
    assert _error_of(excinfo.value)["code"] == "rate_limit"
    assert [r["status"] for r in fake.requests] == [429]


# -- hosted page and control endpoints -------------------------------------------------------


def test_hosted_page_shows_demo_banner_and_amount(fake: StripeFake) -> None:
    session = create_session(fake)
    status, headers, html = raw_request(fake, "GET", f"/pay/{session.id}")
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert BANNER in html
    assert "¥1,234.56" in html
    assert "Starverse credit top-up" in html
    for method in ("card", "alipay", "wechat_pay", "async"):
        assert f'name="method" value="{method}"' in html
    assert f'<form method="post" action="/pay/{session.id}">' in html
    assert 'href="http://127.0.0.1:8000/billing/cancel"' in html


def test_hosted_page_post_pays_and_redirects(fake: StripeFake) -> None:
    session = create_session(fake)
    status, headers, _ = raw_request(
        fake,
        "POST",
        f"/pay/{session.id}",
        "method=wechat_pay",
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 303
    assert headers["location"] == (f"http://127.0.0.1:8000/billing/return?session={session.id}")
    assert fake.session(session.id)["payment_status"] == "paid"
    intent = fake.payment_intent(fake.session(session.id)["payment_intent"])
    assert fake.charge(intent["latest_charge"])["payment_method_details"] == {"type": "wechat_pay"}

    status, _, html = raw_request(fake, "GET", f"/pay/{session.id}")
    assert status == 200
    assert "already complete" in html
    assert "<form" not in html


def test_hosted_page_for_expired_and_unknown_sessions(fake: StripeFake) -> None:
    session = create_session(fake)
    fake.expire(session.id)
    status, _, html = raw_request(fake, "GET", f"/pay/{session.id}")
    assert status == 200
    assert "expired" in html
    assert BANNER in html
    status, _, html = raw_request(fake, "POST", f"/pay/{session.id}", "method=card")
    assert status == 400
    assert raw_request(fake, "GET", "/pay/cs_test_nope")[0] == 404


def test_control_endpoints_over_http(hooked: StripeFake, receiver: Receiver) -> None:
    session = create_session(hooked)
    status, _, body = raw_request(hooked, "POST", f"/_fake/sessions/{session.id}/pay?method=card")
    assert status == 200
    intent_id = json.loads(body)["payment_intent"]
    refund = make_client(hooked).v1.refunds.create(params={"payment_intent": intent_id})
    status, _, body = raw_request(
        hooked, "POST", f"/_fake/refunds/{refund.id}/settle?outcome=failed"
    )
    assert (status, json.loads(body)["status"]) == (200, "failed")

    status, _, body = raw_request(hooked, "POST", "/_fake/faults?status=500&count=2")
    assert json.loads(body) == {"object": "faults", "pending": [500, 500]}
    assert raw_request(hooked, "GET", "/v1/refunds/x")[0] == 500
    assert raw_request(hooked, "GET", "/v1/refunds/x")[0] == 500
    assert raw_request(hooked, "GET", "/v1/refunds/x")[0] == 401
    assert hooked.wait_for_webhooks(5)

    status, _, body = raw_request(hooked, "GET", "/_fake/events")
    listed = json.loads(body)["data"]
    assert [item["type"] for item in listed] == [
        "checkout.session.completed",
        "refund.created",
        "refund.updated",
        "refund.failed",
    ]
    assert {item["status"] for item in listed} == {"delivered"}
    status, _, body = raw_request(hooked, "POST", f"/_fake/events/{listed[0]['id']}/resend")
    assert status == 200
    assert hooked.wait_for_webhooks(5)
    assert receiver.types()[-1] == "checkout.session.completed"
    assert len(receiver.received) == 5

    other = create_session(hooked)
    status, _, body = raw_request(hooked, "POST", f"/_fake/sessions/{other.id}/expire")
    assert json.loads(body)["status"] == "expired"
    status, _, body = raw_request(hooked, "POST", f"/_fake/sessions/{other.id}/pay")
    assert status == 400
    assert json.loads(body)["error"]["code"] == "checkout_session_expired"


def test_format_amount() -> None:
    assert format_amount(123456, "cny") == "¥1,234.56"
    assert format_amount(5, "cny") == "¥0.05"
    assert format_amount(100000000, "cny") == "¥1,000,000.00"
    assert format_amount(500, "jpy") == "¥500"


def test_module_runs_in_the_foreground_and_stops_on_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "devstack.stripe", "--port", "0", "--webhook-secret", SECRET],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        started = process.stdout.readline()
        assert "kind=started" in started
        assert "demo=true" in started
        url = started.split(" url=")[1].split()[0]
        with urllib.request.urlopen(f"{url}/_fake/events", timeout=5) as response:  # noqa: S310
            assert json.loads(response.read()) == {"object": "list", "data": []}
        line = process.stdout.readline()
        assert "kind=request method=GET path=/_fake/events status=200 duration_ms=" in line
        assert urlsplit(url).hostname == "127.0.0.1"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_fake_imports_neither_django_nor_stripe() -> None:
    code = (
        "import sys, devstack.stripe; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'stripe')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "[]"
