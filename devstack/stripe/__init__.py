"""A local stand-in for the part of Stripe's HTTP API Starverse uses — a development demo.

Point the real ``stripe`` library at it (``base_addresses={"api": fake.url}``); it keeps
checkout sessions, payments, refunds and webhook events in memory, signs and delivers webhooks
like Stripe, and never moves real money. Standard library only; it does not import Django."""

from .errors import StripeFakeError
from .pages import BANNER, format_amount
from .server import DEFAULT_API_VERSION, DEFAULT_WEBHOOK_SECRET, StripeFake
from .webhooks import DeliveryAttempt, EventRecord, sign

__all__ = [
    "BANNER",
    "DEFAULT_API_VERSION",
    "DEFAULT_WEBHOOK_SECRET",
    "DeliveryAttempt",
    "EventRecord",
    "StripeFake",
    "StripeFakeError",
    "format_amount",
    "sign",
]
