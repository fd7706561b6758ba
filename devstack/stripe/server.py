"""The HTTP side of the fake: routing, auth, idempotency, fault injection and the hosted page,
plus ``StripeFake``, the object tests and ``python -m devstack.stripe`` drive."""

import base64
import secrets
import threading
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from . import pages
from .errors import StripeFakeError, fault, invalid_request
from .forms import decode_form
from .store import PAY_METHODS, RequestContext, Store
from .transport import (
    API_ROUTES,
    CONTROL_ROUTES,
    Handler,
    Idempotent,
    Response,
    Server,
    error_response,
    html_response,
    json_response,
    match_route,
)
from .webhooks import DEFAULT_RETRY_DELAYS, Dispatcher, EventRecord, sign

DEFAULT_WEBHOOK_SECRET = "whsec_demo_local_stripe_fake_not_a_real_secret"  # noqa: S105 - public demo value
DEFAULT_API_VERSION = "2024-06-20"
LogFn = Callable[[dict[str, Any]], None]


class StripeFake:
    """A local stand-in for the slice of Stripe's API the platform uses. Demo only."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        webhook_url: str | None = None,
        webhook_secret: str = DEFAULT_WEBHOOK_SECRET,
        api_key_prefix: str = "sk_test_",
        *,
        livemode: bool = False,
        api_version: str = DEFAULT_API_VERSION,
        webhook_retry_delays: tuple[float, ...] = DEFAULT_RETRY_DELAYS,
        webhook_timeout: float = 5.0,
        log: LogFn | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self._configured = (webhook_url, webhook_secret)
        self.api_key_prefix = api_key_prefix
        self.livemode = livemode
        self.api_version = api_version
        self.deliver_webhooks = True
        self.log = log
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._faults: deque[int] = deque()
        self._idempotency: dict[tuple[str, str], Idempotent] = {}
        self._requests: deque[dict[str, Any]] = deque(maxlen=2000)
        self._dispatcher = Dispatcher(
            url=lambda: self.webhook_url,
            secret=lambda: self.webhook_secret,
            retry_delays=webhook_retry_delays,
            timeout=webhook_timeout,
            log=self._emit_log,
        )
        self._store = self._new_store()

    def _new_store(self) -> Store:
        return Store(
            base_url=lambda: self.url,
            api_version=self.api_version,
            on_event=self._dispatcher.enqueue,
            will_deliver=lambda: self.deliver_webhooks and bool(self.webhook_url),
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, poll_interval: float = 0.02) -> "StripeFake":
        """Serve in a daemon thread. ``poll_interval`` bounds how long ``stop()`` waits."""
        if self._server is not None:
            raise RuntimeError("StripeFake is already running")
        server = Server((self.host, self.port), Handler)
        server.fake = self
        self._dispatcher.resume()
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True
        )
        self._thread.name = f"stripe-fake:{self.port}"
        self._thread.start()
        return self

    def stop(self) -> None:
        self._dispatcher.stop()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def reset(self, timeout: float = 10.0) -> None:
        """Forget every session, payment, refund, event, request, idempotency key and queued
        fault, cancel webhook retries still waiting, and go back to the webhook settings it was
        made with and delivery on: one running fake can serve test after test."""
        self._dispatcher.stop()  # deliveries waiting for a retry give up
        self._dispatcher.wait_idle(timeout)
        self._dispatcher.resume()
        with self._lock:
            self._faults.clear()
            self._idempotency.clear()
            self._requests.clear()
        self.webhook_url, self.webhook_secret = self._configured
        self.deliver_webhooks = True
        self._store = self._new_store()

    def __enter__(self) -> "StripeFake":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- in-process helpers ------------------------------------------------------------------

    def pay(self, session_id: str, method: str = "card") -> dict[str, Any]:
        if method not in PAY_METHODS:
            raise invalid_request(f"method must be one of {', '.join(PAY_METHODS)}", param="method")
        return self._store.pay(session_id, method, None)

    def async_result(self, session_id: str, outcome: str = "succeeded") -> dict[str, Any]:
        return self._store.async_result(session_id, outcome, None)

    def expire(self, session_id: str) -> dict[str, Any]:
        return self._store.expire_session(session_id, None)

    def settle_refund(self, refund_id: str, outcome: str = "succeeded") -> dict[str, Any]:
        return self._store.settle_refund(refund_id, outcome, None)

    def refund_in_dashboard(
        self, charge_id: str, amount: int | None = None, *, pending: bool = False
    ) -> dict[str, Any]:
        """A refund made by hand in Stripe's dashboard, not through the API (no metadata)."""
        return self._store.refund_in_dashboard(charge_id, amount, pending, None)

    def open_dispute(
        self,
        charge_id: str,
        amount: int | None = None,
        *,
        reason: str = "fraudulent",
        inquiry: bool = False,
    ) -> dict[str, Any]:
        """The card holder disputes the charge at their bank (an ``inquiry`` withdraws nothing)."""
        return self._store.open_dispute(charge_id, amount, reason, inquiry, None)

    def close_dispute(self, dispute_id: str, outcome: str = "won") -> dict[str, Any]:
        return self._store.close_dispute(dispute_id, outcome, None)

    def inject_faults(self, status: int = 500, count: int = 1) -> None:
        if not 400 <= status <= 599 or count < 0:
            raise invalid_request("status must be 400-599 and count >= 0", param="status")
        with self._lock:
            self._faults.extend([status] * count)

    def advance_clock(self, seconds: float) -> None:
        """Move the fake's clock forward; open sessions past ``expires_at`` expire."""
        self._store.advance_clock(seconds)

    def session(self, session_id: str) -> dict[str, Any]:
        return self._store.get("session", session_id)

    def refund(self, refund_id: str) -> dict[str, Any]:
        return self._store.get("refund", refund_id)

    def payment_intent(self, intent_id: str) -> dict[str, Any]:
        return self._store.get("payment_intent", intent_id)

    def charge(self, charge_id: str) -> dict[str, Any]:
        return self._store.get("charge", charge_id)

    def dispute(self, dispute_id: str) -> dict[str, Any]:
        return self._store.get("dispute", dispute_id)

    @property
    def sessions(self) -> list[dict[str, Any]]:
        """Snapshots of every checkout session, newest first."""
        return self._store.list_sessions()

    @property
    def events(self) -> list[EventRecord]:
        """Snapshots of every event so far, oldest first, with their delivery attempts."""
        with self._store.lock, self._dispatcher.lock:
            return [record.snapshot() for record in self._store.events]

    def event_types(self) -> list[str]:
        return [record.type for record in self.events]

    def resend(self, event_id: str) -> EventRecord:
        """Deliver an event again (even while ``deliver_webhooks`` is off); answers the event
        as queued (``pending``), before the delivery can have started."""
        if not self.webhook_url:
            raise invalid_request("No webhook URL is configured", param="webhook_url")
        with self._store.lock, self._dispatcher.lock:
            record = self._store.get_event(event_id)
            self._dispatcher.enqueue(record)
            return record.snapshot()

    def wait_for_webhooks(self, timeout: float = 5.0) -> bool:
        """Block until every queued delivery has finished (succeeded or given up)."""
        return self._dispatcher.wait_idle(timeout)

    def signature_header(self, payload: str, timestamp: int | None = None) -> str:
        """A valid ``Stripe-Signature`` for ``payload`` under this fake's webhook secret."""
        return sign(payload, self.webhook_secret, timestamp)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The last 2000 requests served: method, path, status, request_id, idempotency_key…"""
        with self._lock:
            return [dict(entry) for entry in self._requests]

    # -- logging ---------------------------------------------------------------------------

    def record_request(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._requests.append(dict(entry))
        self._emit_log(entry)

    def _emit_log(self, entry: dict[str, Any]) -> None:
        if self.log is not None:
            self.log(entry)

    # -- HTTP ------------------------------------------------------------------------------

    def handle(
        self, method: str, target: str, raw: str, headers: dict[str, str], entry: dict[str, Any]
    ) -> Response:
        split = urlsplit(target)
        path = split.path
        try:
            if path.startswith("/v1/"):
                return self._api(method, path, split.query, raw, headers, entry)
            if path.startswith("/_fake/"):
                return self._control(method, path, split.query, raw)
            if path == "/" and method == "GET":
                events = [record.to_dict() for record in reversed(self.events)]
                return html_response(200, pages.index_page(self._store.list_sessions(), events))
            if path.startswith("/pay/"):
                return self._hosted(method, path[len("/pay/") :], raw)
        except StripeFakeError as err:
            return error_response(err)
        return error_response(StripeFakeError(404, f"Unrecognized request URL ({method}: {path})."))

    def _take_fault(self) -> int | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _authenticate(self, headers: dict[str, str]) -> tuple[str, bool]:
        value = headers.get("authorization", "")
        scheme, _, credential = value.partition(" ")
        key = credential.strip()
        if scheme.lower() == "basic":
            try:
                key = base64.b64decode(credential).decode().split(":", 1)[0]
            except ValueError:
                key = ""
        if not value or not key:
            raise StripeFakeError(
                401,
                "You did not provide an API key. You need to provide your API key in the "
                "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer "
                "YOUR_SECRET_KEY').",
            )
        live = key.startswith("sk_live_")
        valid = key.startswith(self.api_key_prefix) and len(key) > len(self.api_key_prefix)
        if live and self.livemode and len(key) > len("sk_live_"):
            valid = True
        if not valid:
            raise StripeFakeError(401, f"Invalid API Key provided: {key[:8]}{'*' * 4}{key[-4:]}")
        return key, live

    def _api(
        self,
        method: str,
        path: str,
        query: str,
        raw: str,
        headers: dict[str, str],
        entry: dict[str, Any],
    ) -> Response:
        request_id = "req_" + secrets.token_hex(7)
        idem_key = headers.get("idempotency-key") if method == "POST" else None
        entry.update(request_id=request_id, idempotency_key=idem_key or "-")
        base = {"Request-Id": request_id, "Stripe-Version": self.api_version}
        if idem_key:
            base["Idempotency-Key"] = idem_key
        injected = self._take_fault()
        if injected is not None:
            entry["fault"] = injected
            err = fault(injected)
            return json_response(err.status, err.body(), base)
        try:
            api_key, live = self._authenticate(headers)
            params = decode_form(raw if method == "POST" else query)
            route = match_route(API_ROUTES, method, path)
            if route is None:
                raise StripeFakeError(
                    404,
                    f"Unrecognized request URL ({method}: {path}). The local Stripe fake only "
                    "speaks checkout sessions, refunds, payment intents, charges, disputes and "
                    "events.",
                )
        except StripeFakeError as err:
            return json_response(err.status, err.body(), {**base, **err.headers})
        # the API version the request asks for (the library pins its own), else the account's
        version = headers.get("stripe-version") or self.api_version
        ctx: RequestContext = {"id": request_id, "idempotency_key": idem_key, "version": version}
        if not idem_key:
            return self._run(route, params, live, ctx, base)
        slot = (api_key, idem_key)
        with self._lock:
            previous = self._idempotency.get(slot)
            if previous is None:
                self._idempotency[slot] = Idempotent(method, path, params, request_id)
        if previous is not None:
            return self._replay(previous, method, path, params, idem_key, base, entry)
        try:
            response = self._run(route, params, live, ctx, base)
        except BaseException:
            with self._lock:
                del self._idempotency[slot]
            raise
        with self._lock:
            if response.status >= 500:
                del self._idempotency[slot]  # Stripe doesn't keep results of failed executions
            else:
                self._idempotency[slot].response = response
        return response

    def _replay(
        self,
        previous: Idempotent,
        method: str,
        path: str,
        params: dict[str, Any],
        key: str,
        base: dict[str, str],
        entry: dict[str, Any],
    ) -> Response:
        if (previous.method, previous.path, previous.params) != (method, path, params):
            err = StripeFakeError(
                400,
                "Keys for idempotent requests can only be used with the same parameters they "
                f"were first used with. Try using a key other than '{key}' if you meant to "
                "execute a different request.",
                type="idempotency_error",
            )
            return json_response(400, err.body(), base)
        if previous.response is None:
            err = StripeFakeError(
                409,
                "There is currently another in-progress request using this Idempotent Key "
                "(that probably means you submitted twice, and the other request is still "
                "going through): " + key + ". Please try again later.",
                code="idempotency_key_in_use",
            )
            return json_response(409, err.body(), base)
        entry["replayed"] = True
        old = previous.response
        headers = {
            **old.headers,
            **base,
            "Idempotent-Replayed": "true",
            "Original-Request": previous.request_id,
        }
        return Response(old.status, old.body, old.content_type, headers)

    def _run(
        self,
        route: tuple[str, tuple[str, ...]],
        params: dict[str, Any],
        live: bool,
        ctx: RequestContext,
        base: dict[str, str],
    ) -> Response:
        name, args = route
        store = self._store
        try:
            if name == "create_session":
                result = store.create_session(params, live, ctx)
            elif name == "expire_session":
                result = store.expire_session(args[0], ctx)
            elif name == "create_refund":
                result = store.create_refund(params, live, ctx)
            elif name == "get_event":
                result = store.get_event(args[0]).event
            else:
                kind = name.removeprefix("get_")
                result = store.get(kind, args[0])
            expand = params.get("expand") or []
            if expand:
                if not isinstance(expand, list) or not all(isinstance(p, str) for p in expand):
                    raise invalid_request("Invalid array", param="expand")
                result = store.expanded(result, expand)
        except StripeFakeError as err:
            return json_response(err.status, err.body(), {**base, **err.headers})
        return json_response(200, result, base)

    def _control(self, method: str, path: str, query: str, raw: str) -> Response:
        route = match_route(CONTROL_ROUTES, method, path)
        if route is None:
            raise StripeFakeError(404, f"Unrecognized control URL ({method}: {path}).")
        name, args = route
        params = dict(parse_qsl(query))
        params.update(parse_qsl(raw))
        if name == "pay":
            return json_response(200, self.pay(args[0], params.get("method", "card")))
        if name == "async_result":
            return json_response(
                200, self.async_result(args[0], params.get("outcome", "succeeded"))
            )
        if name == "expire":
            return json_response(200, self.expire(args[0]))
        if name == "settle":
            return json_response(
                200, self.settle_refund(args[0], params.get("outcome", "succeeded"))
            )
        if name in ("dashboard_refund", "open_dispute"):
            amount = params.get("amount")
            try:
                fen = int(amount) if amount else None
            except ValueError:
                raise invalid_request("amount must be an integer", param="amount") from None
            if name == "dashboard_refund":
                waits = params.get("pending") == "true"
                return json_response(200, self.refund_in_dashboard(args[0], fen, pending=waits))
            return json_response(
                200,
                self.open_dispute(
                    args[0],
                    fen,
                    reason=params.get("reason", "fraudulent"),
                    inquiry=params.get("inquiry") == "true",
                ),
            )
        if name == "close_dispute":
            return json_response(200, self.close_dispute(args[0], params.get("outcome", "won")))
        if name == "events":
            data = [record.to_dict() for record in self.events]
            return json_response(200, {"object": "list", "data": data})
        if name == "resend":
            return json_response(200, self.resend(args[0]).to_dict())
        try:
            status = int(params.get("status", "500"))
            count = int(params.get("count", "1"))
        except ValueError:
            raise invalid_request("status and count must be integers", param="status") from None
        self.inject_faults(status, count)
        with self._lock:
            pending = list(self._faults)
        return json_response(200, {"object": "faults", "pending": pending})

    def _hosted(self, method: str, session_id: str, raw: str) -> Response:
        try:
            session = self._store.get("session", session_id)
            product = self._store.session_line(session_id)["name"]
        except StripeFakeError:
            return html_response(404, pages.message_page("Not found", "No such checkout session."))
        if method == "GET":
            return html_response(200, pages.checkout_page(session, product))
        if method != "POST":
            return html_response(405, pages.message_page("Method not allowed", "Use GET or POST."))
        choice = dict(parse_qsl(raw)).get("method", "card")
        try:
            paid = self.pay(session_id, choice)
        except StripeFakeError as err:
            current = self._store.get("session", session_id)
            return html_response(400, pages.checkout_page(current, product, err.message))
        target = paid["success_url"].replace("{CHECKOUT_SESSION_ID}", session_id)
        return html_response(303, pages.message_page("Paid", "Paid (demo)."), {"Location": target})
