"""In-memory state of the fake: checkout sessions, payment intents, charges, refunds, disputes
and events.

Every public method takes the lock, so the store is safe to share between the HTTP threads, the
in-process helpers tests call and the webhook dispatcher."""

import copy
import json
import secrets
import string
import threading
import time
from collections.abc import Callable
from typing import Any

from . import validation
from .errors import StripeFakeError, invalid_request, missing, unexpected_state
from .webhooks import EventRecord

_ALPHABET = string.ascii_letters + string.digits
PAY_METHODS = ("card", "alipay", "wechat_pay", "async")
DISPUTE_REASONS = (
    "bank_cannot_process",
    "credit_not_processed",
    "customer_initiated",
    "debit_not_authorized",
    "duplicate",
    "fraudulent",
    "general",
    "incorrect_account_details",
    "insufficient_funds",
    "product_not_received",
    "product_unacceptable",
    "subscription_canceled",
    "unrecognized",
)
DISPUTE_FEE = 1500  # what Stripe charges the platform per dispute (in the charge's currency here)
RequestContext = dict[str, str | None]
# the object an id's prefix names, for ``expand[]``
_EXPANDABLE = {"pi": "payment_intent", "ch": "charge", "re": "refund", "dp": "dispute"}


def new_id(prefix: str, livemode: bool = False, length: int = 24) -> str:
    body = "".join(secrets.choice(_ALPHABET) for _ in range(length))
    return f"{prefix}_{'live' if livemode else 'test'}_{body}"


class Store:
    def __init__(
        self,
        *,
        base_url: Callable[[], str],
        api_version: str,
        on_event: Callable[[EventRecord], None],
        will_deliver: Callable[[], bool],
    ) -> None:
        self.lock = threading.RLock()
        self._base_url = base_url
        self._api_version = api_version
        self._on_event = on_event
        self._will_deliver = will_deliver
        self._clock_offset = 0.0
        self.sessions: dict[str, dict[str, Any]] = {}
        self.lines: dict[str, dict[str, Any]] = {}
        self.intents: dict[str, dict[str, Any]] = {}
        self.charges: dict[str, dict[str, Any]] = {}
        self.refunds: dict[str, dict[str, Any]] = {}
        self.disputes: dict[str, dict[str, Any]] = {}
        self.stream_of: dict[str, str] = {}  # object id -> the checkout session it hangs off
        self.events: list[EventRecord] = []
        self.events_by_id: dict[str, EventRecord] = {}

    # -- clock -----------------------------------------------------------------------------

    def now(self) -> int:
        return int(time.time() + self._clock_offset)

    def advance_clock(self, seconds: float) -> None:
        with self.lock:
            self._clock_offset += seconds
            self.sweep()

    def sweep(self) -> None:
        """Expire open sessions whose ``expires_at`` has passed (Stripe does it on a timer)."""
        with self.lock:
            now = self.now()
            for session in self.sessions.values():
                if session["status"] == "open" and session["expires_at"] <= now:
                    self._expire(session, None)

    # -- events ----------------------------------------------------------------------------

    def _emit(
        self,
        kind: str,
        obj: dict[str, Any],
        stream: str,
        ctx: RequestContext | None,
        previous: dict[str, Any] | None = None,
    ) -> None:
        deliver = self._will_deliver()
        data: dict[str, Any] = {"object": copy.deepcopy(obj)}
        if previous is not None:
            data["previous_attributes"] = previous
        event = {
            "id": new_id("evt", obj.get("livemode", False)),
            "object": "event",
            "api_version": self._api_version,
            "created": self.now(),
            "data": data,
            "livemode": obj.get("livemode", False),
            "pending_webhooks": 1 if deliver else 0,
            "request": {
                "id": (ctx or {}).get("id"),
                "idempotency_key": (ctx or {}).get("idempotency_key"),
            },
            "type": kind,
        }
        record = EventRecord(
            id=event["id"],
            type=kind,
            event=event,
            body=json.dumps(event, indent=2, ensure_ascii=False),
            stream=stream,
            status="not_sent",
        )
        self.events.append(record)
        self.events_by_id[record.id] = record
        if deliver:
            self._on_event(record)

    # -- lookups ---------------------------------------------------------------------------

    def _session(self, session_id: str) -> dict[str, Any]:
        session = self.sessions.get(session_id)
        if session is None:
            raise missing("checkout.session", session_id)
        return session

    def _charge_view(self, charge: dict[str, Any]) -> dict[str, Any]:
        view = copy.deepcopy(charge)
        refunds = [
            copy.deepcopy(refund)
            for refund in reversed(self.refunds.values())
            if refund["charge"] == charge["id"]
        ]
        view["refunds"] = {
            "object": "list",
            "data": refunds,
            "has_more": False,
            "total_count": len(refunds),
            "url": f"/v1/charges/{charge['id']}/refunds",
        }
        return view

    def get(self, kind: str, object_id: str) -> dict[str, Any]:
        """A snapshot of one object: ``kind`` is session, payment_intent, charge, refund or
        dispute."""
        with self.lock:
            self.sweep()
            if kind == "session":
                return copy.deepcopy(self._session(object_id))
            if kind == "charge":
                charge = self.charges.get(object_id)
                if charge is None:
                    raise missing("charge", object_id)
                return self._charge_view(charge)
            table = {
                "payment_intent": self.intents,
                "refund": self.refunds,
                "dispute": self.disputes,
            }[kind]
            if object_id not in table:
                raise missing(kind, object_id)
            return copy.deepcopy(table[object_id])

    def expanded(self, obj: dict[str, Any], paths: list[str]) -> dict[str, Any]:
        """``obj`` with the ids named by ``expand[]`` paths (``payment_intent``,
        ``payment_intent.latest_charge``, ``charge`` …) replaced by the objects, as Stripe
        expands them: each dotted step expands one level, a null stays null."""
        with self.lock:
            for path in paths:
                self._expand_path(obj, path.split("."), path)
            return obj

    def _expand_path(self, obj: dict[str, Any], steps: list[str], path: str) -> None:
        field, rest = steps[0], steps[1:]
        if field not in obj:
            raise invalid_request(f"This property cannot be expanded ({path}).", param="expand")
        value = obj[field]
        if isinstance(value, str):
            kind = _EXPANDABLE.get(value.split("_", 1)[0])
            if kind is None:
                raise invalid_request(f"This property cannot be expanded ({path}).", param="expand")
            value = obj[field] = self.get(kind, value)
        if rest and isinstance(value, dict):
            self._expand_path(value, rest, path)

    def get_event(self, event_id: str) -> EventRecord:
        with self.lock:
            record = self.events_by_id.get(event_id)
            if record is None:
                raise missing("event", event_id)
            return record

    def session_line(self, session_id: str) -> dict[str, Any]:
        with self.lock:
            self._session(session_id)
            return dict(self.lines[session_id])

    def list_sessions(self) -> list[dict[str, Any]]:
        with self.lock:
            self.sweep()
            return [copy.deepcopy(s) for s in reversed(self.sessions.values())]

    # -- checkout sessions -----------------------------------------------------------------

    def create_session(
        self, params: dict[str, Any], livemode: bool, ctx: RequestContext | None
    ) -> dict[str, Any]:
        with self.lock:
            now = self.now()
            version = (ctx or {}).get("version") or self._api_version
            spec = validation.session_params(params, now, version=version)
            session_id = new_id("cs", livemode, 32)
            line = spec["line"]
            amount = line["unit_amount"] * line["quantity"]
            session = {
                "id": session_id,
                "object": "checkout.session",
                "amount_subtotal": amount,
                "amount_total": amount,
                "cancel_url": spec["cancel_url"],
                "client_reference_id": spec["client_reference_id"],
                "created": now,
                "currency": spec["currency"],
                "customer_details": None,
                "customer_email": spec["customer_email"],
                "expires_at": spec["expires_at"],
                "livemode": livemode,
                "metadata": spec["metadata"],
                "mode": spec["mode"],
                "payment_intent": None,
                "payment_method_options": spec["payment_method_options"],
                "payment_method_types": spec["payment_method_types"],
                "payment_status": "unpaid",
                "status": "open",
                "success_url": spec["success_url"],
                "url": f"{self._base_url()}/pay/{session_id}",
            }
            self.sessions[session_id] = session
            self.lines[session_id] = {
                **line,
                "intent_metadata": spec["intent_metadata"],
                "intent_description": spec["intent_description"],
            }
            self.stream_of[session_id] = session_id
            return copy.deepcopy(session)

    def _expire(self, session: dict[str, Any], ctx: RequestContext | None) -> None:
        session["status"] = "expired"
        session["url"] = None
        self._emit("checkout.session.expired", session, session["id"], ctx)

    def expire_session(self, session_id: str, ctx: RequestContext | None) -> dict[str, Any]:
        with self.lock:
            self.sweep()
            session = self._session(session_id)
            if session["status"] != "open":
                raise unexpected_state(
                    f'Only Checkout Sessions with a status in ["open"] can be expired. This '
                    f'Checkout Session has a status of "{session["status"]}".',
                    code="checkout_session_not_open",
                )
            self._expire(session, ctx)
            return copy.deepcopy(session)

    def _new_charge(self, intent: dict[str, Any], method: str) -> dict[str, Any]:
        charge = {
            "id": new_id("ch", intent["livemode"]),
            "object": "charge",
            "amount": intent["amount"],
            "amount_captured": intent["amount"],
            "amount_refunded": 0,
            "created": self.now(),
            "currency": intent["currency"],
            "disputed": False,
            "livemode": intent["livemode"],
            "metadata": dict(intent["metadata"]),
            "paid": True,
            "payment_intent": intent["id"],
            "payment_method_details": {"type": method},
            "refunded": False,
            "status": "succeeded",
        }
        self.charges[charge["id"]] = charge
        self.stream_of[charge["id"]] = self.stream_of[intent["id"]]
        intent["latest_charge"] = charge["id"]
        intent["amount_received"] = intent["amount"]
        intent["status"] = "succeeded"
        return charge

    def pay(self, session_id: str, method: str, ctx: RequestContext | None) -> dict[str, Any]:
        with self.lock:
            self.sweep()
            session = self._session(session_id)
            if session["status"] == "expired":
                raise unexpected_state(
                    "This Checkout Session has expired and can no longer be paid.",
                    code="checkout_session_expired",
                )
            if session["status"] != "open":
                raise unexpected_state(
                    "This Checkout Session is already complete.",
                    code="checkout_session_complete",
                )
            if method != "async" and method not in session["payment_method_types"]:
                raise invalid_request(
                    f"Invalid method: {method}. This session accepts "
                    f"{', '.join([*session['payment_method_types'], 'async'])}.",
                    param="method",
                )
            line = self.lines[session_id]
            intent = {
                "id": new_id("pi", session["livemode"]),
                "object": "payment_intent",
                "amount": session["amount_total"],
                "amount_received": 0,
                "created": self.now(),
                "currency": session["currency"],
                "description": line["intent_description"],
                "last_payment_error": None,
                "latest_charge": None,
                "livemode": session["livemode"],
                "metadata": dict(line["intent_metadata"]),
                # as Stripe's: the methods the session offered; the one used is the charge's
                # payment_method_details.type
                "payment_method_types": list(session["payment_method_types"]),
                "status": "processing",
            }
            self.intents[intent["id"]] = intent
            self.stream_of[intent["id"]] = session_id
            if method != "async":
                self._new_charge(intent, method)
                session["payment_status"] = "paid"
            session["status"] = "complete"
            session["url"] = None
            session["payment_intent"] = intent["id"]
            session["customer_details"] = {"email": session["customer_email"]}
            self._emit("checkout.session.completed", session, session_id, ctx)
            return copy.deepcopy(session)

    def async_result(
        self, session_id: str, outcome: str, ctx: RequestContext | None
    ) -> dict[str, Any]:
        if outcome not in ("succeeded", "failed"):
            raise invalid_request("outcome must be succeeded or failed", param="outcome")
        with self.lock:
            session = self._session(session_id)
            intent = self.intents.get(session["payment_intent"] or "")
            if (
                session["status"] != "complete"
                or intent is None
                or intent["status"] != "processing"
            ):
                raise unexpected_state(
                    "This Checkout Session has no delayed payment waiting for a result.",
                    code="no_pending_async_payment",
                )
            if outcome == "succeeded":
                self._new_charge(intent, "demo_delayed")
                session["payment_status"] = "paid"
                kind = "checkout.session.async_payment_succeeded"
            else:
                intent["status"] = "requires_payment_method"
                intent["last_payment_error"] = {
                    "code": "payment_method_provider_decline",
                    "message": "The delayed payment failed (local Stripe fake).",
                    "type": "card_error",
                }
                kind = "checkout.session.async_payment_failed"
            self._emit(kind, session, session_id, ctx)
            return copy.deepcopy(session)

    # -- refunds ---------------------------------------------------------------------------

    def _refundable(self, charge: dict[str, Any]) -> int:
        held = sum(
            refund["amount"]
            for refund in self.refunds.values()
            if refund["charge"] == charge["id"] and refund["status"] in ("pending", "succeeded")
        )
        return charge["amount"] - held

    def _charge_for(self, spec: dict[str, Any]) -> dict[str, Any]:
        charge = None
        if spec["payment_intent"] is not None:
            intent = self.intents.get(spec["payment_intent"])
            if intent is None:
                raise missing("payment_intent", spec["payment_intent"], param="payment_intent")
            if intent["status"] != "succeeded" or intent["latest_charge"] is None:
                raise unexpected_state(
                    f"This PaymentIntent ({intent['id']}) does not have a successful charge to "
                    "refund.",
                    code="charge_not_refundable",
                )
            charge = self.charges[intent["latest_charge"]]
        if spec["charge"] is not None:
            by_id = self.charges.get(spec["charge"])
            if by_id is None:
                raise missing("charge", spec["charge"], param="charge")
            if charge is not None and charge["id"] != by_id["id"]:
                raise invalid_request(
                    "The charge does not belong to the given payment_intent.", param="charge"
                )
            charge = by_id
        assert charge is not None
        return charge

    def create_refund(
        self, params: dict[str, Any], livemode: bool, ctx: RequestContext | None
    ) -> dict[str, Any]:
        with self.lock:
            spec = validation.refund_params(params)
            charge = self._charge_for(spec)
            refund = self._new_refund(charge, spec["amount"], spec["metadata"], spec["reason"])
            self._emit("refund.created", refund, self.stream_of[refund["id"]], ctx)
            return copy.deepcopy(refund)

    def _new_refund(
        self,
        charge: dict[str, Any],
        amount: int | None,
        metadata: dict[str, str],
        reason: str | None,
        status: str = "pending",
    ) -> dict[str, Any]:
        left = self._refundable(charge)
        if left <= 0:
            raise invalid_request(
                f"Charge {charge['id']} has already been refunded.",
                code="charge_already_refunded",
            )
        amount = left if amount is None else amount
        if amount > left:
            raise invalid_request(
                f"Refund amount ({amount}) is greater than unrefunded amount on charge ({left}).",
                param="amount",
                code="amount_too_large",
            )
        refund = {
            "id": new_id("re", charge["livemode"]),
            "object": "refund",
            "amount": amount,
            "balance_transaction": None,
            "charge": charge["id"],
            "created": self.now(),
            "currency": charge["currency"],
            "failure_reason": None,
            "metadata": metadata,
            "payment_intent": charge["payment_intent"],
            "reason": reason,
            "status": status,
        }
        if status == "succeeded":
            charge["amount_refunded"] += amount
            charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
        self.refunds[refund["id"]] = refund
        self.stream_of[refund["id"]] = self.stream_of[charge["id"]]
        return refund

    def refund_in_dashboard(
        self, charge_id: str, amount: int | None, pending: bool, ctx: RequestContext | None
    ) -> dict[str, Any]:
        """A refund an operator makes in the Stripe dashboard: no metadata of the platform's.
        A card refund succeeds at once (``refund.created`` then ``charge.refunded``); a
        ``pending`` one waits for ``settle_refund``."""
        with self.lock:
            charge = self._charge(charge_id)
            status = "pending" if pending else "succeeded"
            refund = self._new_refund(charge, amount, {}, "requested_by_customer", status)
            stream = self.stream_of[refund["id"]]
            self._emit("refund.created", refund, stream, ctx)
            if not pending:
                self._emit("charge.refunded", self._charge_view(charge), stream, ctx)
            return copy.deepcopy(refund)

    def settle_refund(
        self, refund_id: str, outcome: str, ctx: RequestContext | None
    ) -> dict[str, Any]:
        if outcome not in ("succeeded", "failed"):
            raise invalid_request("outcome must be succeeded or failed", param="outcome")
        with self.lock:
            refund = self.refunds.get(refund_id)
            if refund is None:
                raise missing("refund", refund_id)
            if refund["status"] != "pending":
                raise unexpected_state(
                    f"Only pending refunds can be settled; this one is {refund['status']}.",
                    code="refund_not_pending",
                )
            stream = self.stream_of[refund_id]
            charge = self.charges[refund["charge"]]
            refund["status"] = outcome
            previous: dict[str, str | None] = {"status": "pending"}
            if outcome == "succeeded":
                charge["amount_refunded"] += refund["amount"]
                charge["refunded"] = charge["amount_refunded"] >= charge["amount"]
                self._emit("refund.updated", refund, stream, ctx, previous)
                self._emit("charge.refunded", self._charge_view(charge), stream, ctx)
            else:
                refund["failure_reason"] = "unknown"
                previous["failure_reason"] = None
                self._emit("refund.updated", refund, stream, ctx, previous)
                self._emit("refund.failed", refund, stream, ctx)
            return copy.deepcopy(refund)

    # -- disputes --------------------------------------------------------------------------

    def _charge(self, charge_id: str) -> dict[str, Any]:
        charge = self.charges.get(charge_id)
        if charge is None:
            raise missing("charge", charge_id, param="charge")
        return charge

    def _balance_transaction(
        self, dispute: dict[str, Any], amount: int, category: str
    ) -> dict[str, Any]:
        fee = DISPUTE_FEE if category == "dispute" else 0
        return {
            "id": new_id("txn", dispute["livemode"]),
            "object": "balance_transaction",
            "amount": amount,
            "currency": dispute["currency"],
            "fee": fee,
            "net": amount - fee,
            "reporting_category": category,
            "type": "adjustment",
        }

    def open_dispute(
        self,
        charge_id: str,
        amount: int | None,
        reason: str,
        inquiry: bool,
        ctx: RequestContext | None,
    ) -> dict[str, Any]:
        """The card holder disputes a charge at their bank. A dispute takes the amount and the
        fee from the balance at once (``charge.dispute.created`` then
        ``charge.dispute.funds_withdrawn``); an ``inquiry`` takes nothing yet."""
        if reason not in DISPUTE_REASONS:
            raise invalid_request(
                f"Invalid reason: must be one of {', '.join(DISPUTE_REASONS)}", param="reason"
            )
        with self.lock:
            charge = self._charge(charge_id)
            if charge.get("disputed"):
                raise unexpected_state(
                    f"Charge {charge_id} is already disputed.", code="charge_disputed"
                )
            amount = charge["amount"] if amount is None else amount
            if not 0 < amount <= charge["amount"]:
                raise invalid_request(f"A dispute is of 1 to {charge['amount']}.", param="amount")
            dispute: dict[str, Any] = {
                "id": new_id("dp", charge["livemode"]),
                "object": "dispute",
                "amount": amount,
                "balance_transactions": [],
                "charge": charge["id"],
                "created": self.now(),
                "currency": charge["currency"],
                "evidence": {},
                "is_charge_refundable": False,
                "livemode": charge["livemode"],
                "metadata": {},
                "payment_intent": charge["payment_intent"],
                "reason": reason,
                "status": "warning_needs_response" if inquiry else "needs_response",
            }
            charge["disputed"] = True
            self.disputes[dispute["id"]] = dispute
            stream = self.stream_of[charge["id"]]
            self.stream_of[dispute["id"]] = stream
            self._emit("charge.dispute.created", dispute, stream, ctx)
            if not inquiry:
                dispute["balance_transactions"].append(
                    self._balance_transaction(dispute, -amount, "dispute")
                )
                self._emit("charge.dispute.funds_withdrawn", dispute, stream, ctx)
            return copy.deepcopy(dispute)

    def close_dispute(
        self, dispute_id: str, outcome: str, ctx: RequestContext | None
    ) -> dict[str, Any]:
        """The bank decides: ``won`` gives the amount back (``charge.dispute.funds_reinstated``,
        then ``charge.dispute.closed``), ``lost`` keeps it; an inquiry just closes."""
        if outcome not in ("won", "lost"):
            raise invalid_request("outcome must be won or lost", param="outcome")
        with self.lock:
            dispute = self.disputes.get(dispute_id)
            if dispute is None:
                raise missing("dispute", dispute_id)
            if dispute["status"] in ("won", "lost", "warning_closed"):
                raise unexpected_state(
                    f"This dispute is already closed ({dispute['status']}).",
                    code="dispute_closed",
                )
            stream = self.stream_of[dispute_id]
            if dispute["status"].startswith("warning_"):
                dispute["status"] = "warning_closed"
            else:
                dispute["status"] = outcome
                if outcome == "won":
                    dispute["balance_transactions"].append(
                        self._balance_transaction(dispute, dispute["amount"], "dispute_reversal")
                    )
                    self._emit("charge.dispute.funds_reinstated", dispute, stream, ctx)
            self._emit("charge.dispute.closed", dispute, stream, ctx)
            return copy.deepcopy(dispute)


__all__ = ["DISPUTE_REASONS", "PAY_METHODS", "Store", "StripeFakeError", "new_id"]
