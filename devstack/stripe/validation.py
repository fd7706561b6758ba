"""Parameter checks for the endpoints the fake speaks, worded like Stripe's own errors."""

import re
from typing import Any

from .errors import invalid_request
from .forms import as_dict, as_int, as_list, as_str, metadata, reject_unknown, require

PAYMENT_METHOD_TYPES = ("card", "alipay", "wechat_pay")
# Stripe's API version 2026-09-30.endive removed `payment_method_types` from creating a Checkout
# Session (`allowed_payment_method_types` names the methods since); versions compare as text.
ENDIVE = "2026-09-30"
REFUND_REASONS = ("duplicate", "fraudulent", "requested_by_customer")
MIN_EXPIRY_S = 30 * 60
MAX_EXPIRY_S = 24 * 60 * 60
EXPIRY_LEEWAY_S = 10

_SESSION_PARAMS = {
    "mode",
    "currency",
    "line_items",
    "success_url",
    "cancel_url",
    "payment_method_types",
    "allowed_payment_method_types",
    "payment_method_options",
    "payment_intent_data",
    "expires_at",
    "metadata",
    "client_reference_id",
    "customer_email",
    "locale",
    "expand",
}
_REFUND_PARAMS = {"payment_intent", "charge", "amount", "metadata", "reason", "expand"}
_CURRENCY = re.compile(r"^[A-Za-z]{3}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _currency(value: Any, param: str) -> str:
    text = as_str(value, param)
    if not _CURRENCY.match(text):
        raise invalid_request(f"Invalid currency: {text}", param=param)
    return text.lower()


def _url(value: Any, param: str) -> str:
    text = as_str(value, param, max_length=5000)
    if not text.startswith(("http://", "https://")):
        raise invalid_request("Not a valid URL", param=param)
    return text


def _line_item(value: Any, currency: str) -> dict[str, Any]:
    prefix = "line_items[0]"
    item = as_dict(value, prefix)
    reject_unknown(item, {"price_data", "quantity", "price"}, prefix)
    if "price" in item:
        raise invalid_request(
            "The local Stripe fake only supports line_items[0][price_data], not saved prices.",
            param=f"{prefix}[price]",
        )
    price = as_dict(require(item, "price_data", prefix), f"{prefix}[price_data]")
    price_prefix = f"{prefix}[price_data]"
    reject_unknown(price, {"currency", "unit_amount", "product_data"}, price_prefix)
    price_currency = _currency(
        require(price, "currency", price_prefix), f"{price_prefix}[currency]"
    )
    if price_currency != currency:
        raise invalid_request(
            f"The line item currency ({price_currency}) must match the session currency "
            f"({currency}).",
            param=f"{price_prefix}[currency]",
        )
    unit_amount = as_int(
        require(price, "unit_amount", price_prefix), f"{price_prefix}[unit_amount]", minimum=1
    )
    product_prefix = f"{price_prefix}[product_data]"
    product = as_dict(require(price, "product_data", price_prefix), product_prefix)
    reject_unknown(product, {"name", "description", "metadata", "images"}, product_prefix)
    name = as_str(require(product, "name", product_prefix), f"{product_prefix}[name]")
    quantity = as_int(require(item, "quantity", prefix), f"{prefix}[quantity]", minimum=1)
    return {"name": name, "unit_amount": unit_amount, "quantity": quantity}


def _methods_param(params: dict[str, Any], version: str) -> str:
    """Which parameter names the session's payment methods at this API version."""
    if version >= ENDIVE:
        if "payment_method_types" in params:
            raise invalid_request(
                "Received unknown parameter: payment_method_types. Since API version "
                f"{ENDIVE}.endive, use allowed_payment_method_types (or dynamic payment "
                "methods) instead.",
                param="payment_method_types",
            )
        return "allowed_payment_method_types"
    if "allowed_payment_method_types" in params:
        raise invalid_request(
            "Received unknown parameter: allowed_payment_method_types (API version "
            f"{ENDIVE}.endive and later).",
            param="allowed_payment_method_types",
        )
    return "payment_method_types"


def _payment_methods(params: dict[str, Any], version: str) -> tuple[list[str], dict[str, Any]]:
    types = ["card"]
    name = _methods_param(params, version)
    if name in params:
        types = []
        for index, raw in enumerate(as_list(params[name], name)):
            param = f"{name}[{index}]"
            kind = as_str(raw, param)
            if kind not in PAYMENT_METHOD_TYPES:
                raise invalid_request(
                    f"Invalid {param}: must be one of {', '.join(PAYMENT_METHOD_TYPES)}",
                    param=param,
                )
            if kind in types:
                raise invalid_request(f"Duplicate payment method type: {kind}", param=param)
            types.append(kind)
        if not types:
            raise invalid_request(f"{name} must not be empty", param=name)
    options = as_dict(params.get("payment_method_options", {}), "payment_method_options")
    reject_unknown(options, {"wechat_pay", "alipay", "card"}, "payment_method_options")
    clean: dict[str, Any] = {}
    if "wechat_pay" in options:
        wechat = as_dict(options["wechat_pay"], "payment_method_options[wechat_pay]")
        reject_unknown(wechat, {"client", "app_id"}, "payment_method_options[wechat_pay]")
        clean["wechat_pay"] = {
            k: as_str(v, f"payment_method_options[wechat_pay][{k}]") for k, v in wechat.items()
        }
    if "wechat_pay" in types:
        client = clean.get("wechat_pay", {}).get("client")
        param = "payment_method_options[wechat_pay][client]"
        if client is None:
            raise invalid_request(
                f"{param} is required when wechat_pay is one of the payment_method_types.",
                param=param,
            )
        if client != "web":
            raise invalid_request(f"Invalid {param}: Checkout only supports 'web'", param=param)
    for key in ("alipay", "card"):
        if key in options:
            clean[key] = as_dict(options[key], f"payment_method_options[{key}]")
    return types, clean


def session_params(params: dict[str, Any], now: int, *, version: str) -> dict[str, Any]:
    """Check ``POST /v1/checkout/sessions`` parameters at the API `version`; answer the
    normalised values (the session's `payment_method_types` are what it accepts, however the
    request named them)."""
    reject_unknown(params, _SESSION_PARAMS)
    mode = as_str(require(params, "mode"), "mode")
    if mode != "payment":
        raise invalid_request(
            f"Invalid mode: {mode}. The local Stripe fake only supports mode=payment.",
            param="mode",
        )
    currency = _currency(require(params, "currency"), "currency")
    items = as_list(require(params, "line_items"), "line_items")
    if len(items) != 1:
        raise invalid_request(
            "The local Stripe fake supports exactly one line item.", param="line_items"
        )
    line = _line_item(items[0], currency)
    success_url = _url(require(params, "success_url"), "success_url")
    cancel_url = _url(require(params, "cancel_url"), "cancel_url")
    types, options = _payment_methods(params, version)
    expires_at = _expires_at(params, now)
    client_reference_id = None
    if params.get("client_reference_id", "") != "":
        client_reference_id = as_str(
            params["client_reference_id"], "client_reference_id", max_length=200
        )
    customer_email = _customer_email(params)
    intent_data = as_dict(params.get("payment_intent_data", {}), "payment_intent_data")
    reject_unknown(intent_data, {"metadata", "description"}, "payment_intent_data")
    return {
        "mode": mode,
        "currency": currency,
        "line": line,
        "success_url": success_url,
        "cancel_url": cancel_url,
        "payment_method_types": types,
        "payment_method_options": options,
        "expires_at": expires_at,
        "metadata": metadata(params.get("metadata", {})),
        "client_reference_id": client_reference_id,
        "customer_email": customer_email,
        "intent_metadata": metadata(
            intent_data.get("metadata", {}), "payment_intent_data[metadata]"
        ),
        "intent_description": intent_data.get("description") or None,
    }


def _expires_at(params: dict[str, Any], now: int) -> int:
    """24 hours from now unless given; a given time must be 30 minutes to 24 hours away."""
    if "expires_at" not in params:
        return now + MAX_EXPIRY_S
    expires_at = as_int(params["expires_at"], "expires_at")
    if expires_at < now + MIN_EXPIRY_S - EXPIRY_LEEWAY_S:
        raise invalid_request(
            "The `expires_at` timestamp must be at least 30 minutes from Checkout Session "
            "creation.",
            param="expires_at",
        )
    if expires_at > now + MAX_EXPIRY_S + EXPIRY_LEEWAY_S:
        raise invalid_request(
            "The `expires_at` timestamp must be less than 24 hours from Checkout Session creation.",
            param="expires_at",
        )
    return expires_at


def _customer_email(params: dict[str, Any]) -> str | None:
    if params.get("customer_email", "") == "":
        return None
    customer_email = as_str(params["customer_email"], "customer_email", max_length=800)
    if not _EMAIL.match(customer_email):
        raise invalid_request(f"Invalid email address: {customer_email}", param="customer_email")
    return customer_email


def refund_params(params: dict[str, Any]) -> dict[str, Any]:
    """Check ``POST /v1/refunds`` parameters (amounts are checked against the charge later)."""
    reject_unknown(params, _REFUND_PARAMS)
    intent = params.get("payment_intent") or None
    charge = params.get("charge") or None
    if intent is None and charge is None:
        raise invalid_request(
            "One of the following params should be provided for this request: payment_intent "
            "or charge.",
            param="payment_intent",
        )
    amount = None
    if params.get("amount", "") != "":
        amount = as_int(params["amount"], "amount", minimum=1)
    reason = None
    if params.get("reason", "") != "":
        reason = as_str(params["reason"], "reason")
        if reason not in REFUND_REASONS:
            raise invalid_request(
                f"Invalid reason: must be one of {', '.join(REFUND_REASONS)}", param="reason"
            )
    return {
        "payment_intent": as_str(intent, "payment_intent") if intent else None,
        "charge": as_str(charge, "charge") if charge else None,
        "amount": amount,
        "reason": reason,
        "metadata": metadata(params.get("metadata", {})),
    }
