"""The one module that talks to Stripe. Every call has an explicit timeout, outbound writes
carry idempotency keys, the library retries what is retryable (connection errors, 409, 5xx,
and 429 when Stripe says so) with backoff and the same key, and what still fails comes out as
one of two errors: retryable (our tasks retry it later) or permanent."""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import stripe
from django.conf import settings

logger = logging.getLogger(__name__)


class GatewayError(Exception):
    pass


class RetryableGatewayError(GatewayError):
    """Stripe was unreachable, rate-limited us or failed on its side: try again later."""


class PermanentGatewayError(GatewayError):
    """Stripe refused the request: retrying the same request will not help."""


class InvalidSignature(GatewayError):
    pass


@dataclass(frozen=True)
class CheckoutSession:
    id: str
    url: str | None
    status: str
    payment_status: str
    amount_total: int | None
    currency: str
    metadata: dict[str, str]
    payment_intent: str | None
    livemode: bool
    # how it was paid: the type of the payment method its charge used ("card", "alipay",
    # "wechat_pay" …), "" until it is paid
    payment_method_type: str = ""


@dataclass(frozen=True)
class Refund:
    id: str
    status: str
    amount: int
    payment_intent: str | None
    metadata: dict[str, str]
    charge: str | None = None
    currency: str = ""


@dataclass(frozen=True)
class Dispute:
    id: str
    status: str
    amount: int
    currency: str
    reason: str
    charge: str | None
    payment_intent: str | None
    livemode: bool


def _client() -> stripe.StripeClient:
    base = {"api": settings.STRIPE_API_BASE} if settings.STRIPE_API_BASE else None
    return stripe.StripeClient(
        settings.STRIPE_SECRET_KEY,
        base_addresses=base,  # type: ignore[arg-type]
        max_network_retries=settings.STRIPE_MAX_NETWORK_RETRIES,
        http_client=stripe.RequestsClient(timeout=settings.STRIPE_TIMEOUT_SECONDS),
    )


def _call(operation: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except (stripe.APIConnectionError, stripe.RateLimitError) as error:
        logger.warning("stripe.retryable op=%s error=%s", operation, type(error).__name__)
        raise RetryableGatewayError(str(error.user_message or error)) from error
    except stripe.APIError as error:
        logger.warning("stripe.retryable op=%s status=%s", operation, error.http_status)
        raise RetryableGatewayError(str(error.user_message or error)) from error
    except stripe.StripeError as error:
        logger.error(
            "stripe.permanent op=%s status=%s code=%s", operation, error.http_status, error.code
        )
        raise PermanentGatewayError(str(error.user_message or error)) from error


# What Stripe sends: a library object (a dict subclass) or a webhook's JSON object; its values
# are JSON of many shapes, hence Any.
StripeData = Mapping[str, Any]


def _plain(obj: StripeData) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def _paid_with(intent: Any) -> str:
    """The payment method type of a session's expanded PaymentIntent: its latest charge's
    `payment_method_details.type` (the intent's `payment_method_types` lists every method the
    session offered), "" while it has no charge or was not expanded."""
    charge = intent.get("latest_charge") if isinstance(intent, dict) else None
    if not isinstance(charge, dict):
        return ""
    return str((charge.get("payment_method_details") or {}).get("type") or "")


def _session(obj: StripeData) -> CheckoutSession:
    obj = _plain(obj)
    intent = obj.get("payment_intent")
    return CheckoutSession(
        id=obj["id"],
        url=obj.get("url"),
        status=obj.get("status") or "",
        payment_status=obj.get("payment_status") or "",
        amount_total=obj.get("amount_total"),
        currency=(obj.get("currency") or "").lower(),
        metadata=dict(obj.get("metadata") or {}),
        payment_intent=intent if isinstance(intent, str) or intent is None else intent["id"],
        livemode=bool(obj.get("livemode")),
        payment_method_type=_paid_with(intent),
    )


def checkout_session_create(
    *,
    topup_id: str,
    tenant_id: str,
    amount_fen: int,
    product_name: str,
    email: str,
    success_url: str,
    cancel_url: str,
    expires_at: int,
    payment_methods: list[str],
) -> CheckoutSession:
    params = {
        "mode": "payment",
        "currency": "cny",
        "line_items": [
            {
                "price_data": {
                    "currency": "cny",
                    "unit_amount": amount_fen,
                    "product_data": {"name": product_name},
                },
                "quantity": 1,
            }
        ],
        # the library pins API version 2026-10-28.endive, which names a session's methods so
        # (payment_method_types was removed from creating one in 2026-09-30.endive)
        "allowed_payment_method_types": payment_methods,
        "success_url": success_url,
        "cancel_url": cancel_url,
        "expires_at": expires_at,
        "client_reference_id": topup_id,
        "customer_email": email,
        "metadata": {"topup_id": topup_id, "tenant_id": tenant_id},
    }
    if "wechat_pay" in payment_methods:
        params["payment_method_options"] = {"wechat_pay": {"client": "web"}}
    obj = _call(
        "checkout.create",
        _client().v1.checkout.sessions.create,
        params=params,
        options={"idempotency_key": f"topup:{topup_id}"},
    )
    return _session(obj)


def checkout_session_retrieve(session_id: str) -> CheckoutSession:
    """The session, with its PaymentIntent and that intent's charge expanded (how it was
    paid)."""
    obj = _call(
        "checkout.retrieve",
        _client().v1.checkout.sessions.retrieve,
        session_id,
        params={"expand": ["payment_intent.latest_charge"]},
    )
    return _session(obj)


def checkout_session_expire(session_id: str) -> CheckoutSession:
    """Close an open session so that it can no longer be paid (Stripe then sends
    `checkout.session.expired`); PermanentGatewayError when it is no longer open."""
    return _session(
        _call(
            "checkout.expire",
            _client().v1.checkout.sessions.expire,
            session_id,
            options={"idempotency_key": f"expire:{session_id}"},
        )
    )


def refund_create(*, refund_id: str, payment_intent: str, amount_fen: int) -> Refund:
    obj = _call(
        "refund.create",
        _client().v1.refunds.create,
        params={
            "payment_intent": payment_intent,
            "amount": amount_fen,
            "metadata": {"refund_id": refund_id},
            "reason": "requested_by_customer",
        },
        options={"idempotency_key": f"refund:{refund_id}"},
    )
    return refund_from(obj)


def _id_of(value: str | StripeData | None) -> str | None:
    """An id Stripe sends either as a string or, expanded, as the object."""
    if value is None or isinstance(value, str):
        return value
    return str(value["id"])


def refund_from(obj: StripeData) -> Refund:
    obj = _plain(obj)
    return Refund(
        id=obj["id"],
        status=obj.get("status") or "",
        amount=int(obj.get("amount") or 0),
        payment_intent=_id_of(obj.get("payment_intent")),
        metadata=dict(obj.get("metadata") or {}),
        charge=_id_of(obj.get("charge")),
        currency=(obj.get("currency") or "").lower(),
    )


def dispute_from(obj: StripeData) -> Dispute:
    obj = _plain(obj)
    return Dispute(
        id=obj["id"],
        status=obj.get("status") or "",
        amount=int(obj.get("amount") or 0),
        currency=(obj.get("currency") or "").lower(),
        reason=obj.get("reason") or "",
        charge=_id_of(obj.get("charge")),
        payment_intent=_id_of(obj.get("payment_intent")),
        livemode=bool(obj.get("livemode")),
    )


def charge_payment_intent(charge_id: str) -> str | None:
    """The PaymentIntent a charge belongs to (for a dispute or refund that names only the
    charge)."""
    obj = _plain(_call("charge.retrieve", _client().v1.charges.retrieve, charge_id))
    return _id_of(obj.get("payment_intent"))


def event_verify(payload: bytes, signature: str) -> dict[str, Any]:
    """The event if the signature matches one of the configured secrets (rotation) within
    the library's default tolerance; InvalidSignature otherwise."""
    if not signature:
        raise InvalidSignature("missing Stripe-Signature header")
    for secret in settings.STRIPE_WEBHOOK_SECRETS:
        try:
            # construct_event's return is unannotated in the library; it builds an Event
            event: stripe.Event = stripe.Webhook.construct_event(payload, signature, secret)
        except stripe.SignatureVerificationError:
            continue
        except ValueError as error:
            raise InvalidSignature(f"payload is not JSON: {error}") from error
        return event.to_dict()
    raise InvalidSignature("signature does not match any configured webhook secret")
