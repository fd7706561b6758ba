"""Services for money coming in and going back: Stripe top-ups, webhooks, refunds (ours and
those made in the Stripe dashboard), bank transfers and operator adjustments that need a second
operator's approval. Disputes (chargebacks) are billing.disputes.

Network calls to Stripe never run inside a database transaction. Every credit is keyed in the
ledger (`topup:{checkout_session}`, `bank:{reference}`, `refund:{id}:reserve`, `adj:{request}`),
and so is every debit of money Stripe gave back outside our refund flow (`refund:{stripe refund}`),
so any number of webhooks, replays, retries and success-page visits converge on one posting."""

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import F, Q, Sum
from django.db.models.functions import Abs
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing import stripe_gateway as gateway
from billing.choices import (
    TOPUP_DESCRIPTIONS,
    ApprovalStatus,
    PaidWith,
    RefundSource,
    RefundStatus,
    TopUpMethod,
    TopUpStatus,
    TransactionKind,
)
from billing.disputes import dispute_apply, topup_for_charge
from billing.holds import hold_place
from billing.models import AdjustmentRequest, LedgerTransaction, Refund, StripeEvent, TopUp, Wallet
from billing.services import (
    adjustment_post,
    arrears_debit_post,
    ledger_post,
    transaction_reverse,
    transaction_reversible_check,
    wallet_credited_after_commit,
)
from events.choices import EventType
from events.emit import emit
from starverse.accounts.audit import audit_record
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, IdempotencyConflict, InvalidInput, ServiceUnavailable
from starverse.core.ids import new_id
from starverse.core.links import public_url
from starverse.core.money import format_fen

if TYPE_CHECKING:
    from starverse.accounts.models import User

logger = logging.getLogger(__name__)
OPEN_STATUSES = (TopUpStatus.CREATED, TopUpStatus.PENDING, TopUpStatus.PROCESSING)


def _require_staff(actor: "User") -> None:
    if not getattr(actor, "is_staff", False):
        raise InvalidInput(_("Only operators can do this."))


def _require_reason(reason: str) -> str:
    if not reason or not reason.strip():
        raise InvalidInput(_("A reason is required."))
    return reason.strip()


# --- top-ups ------------------------------------------------------------------------------


def topup_create(*, user: "User", amount_fen: int, payment_method: str = "") -> TopUp:
    """Open a Stripe Checkout Session for a top-up of the user's wallet, offering every payment
    method the operator enabled, or only `payment_method` (which must be one of them)."""
    low, high = settings.TOPUP_MIN_FEN, settings.TOPUP_MAX_FEN
    enabled = list(settings.STRIPE_PAYMENT_METHODS)
    if payment_method and payment_method not in enabled:
        raise InvalidInput(
            _("Paying by %(method)s is not offered here; choose one of: %(enabled)s.")
            % {"method": payment_method, "enabled": ", ".join(enabled)},
            code="payment_method_unavailable",
        )
    if (
        isinstance(amount_fen, bool)
        or not isinstance(amount_fen, int)
        or not low <= amount_fen <= high
    ):
        raise InvalidInput(
            _("Top-ups are between %(low)s and %(high)s.")
            % {"low": format_fen(low), "high": format_fen(high)},
            code="amount_out_of_range",
        )
    wallet = Wallet.objects.get(tenant_id=user.tenant_id)
    now = timezone.now()
    topup = TopUp.objects.create(
        tenant_id=user.tenant_id,
        wallet=wallet,
        created_by=user,
        amount_fen=amount_fen,
        expires_at=now + timedelta(minutes=settings.TOPUP_CHECKOUT_MINUTES),
    )
    return_url = public_url(reverse("billing:topup_return", args=[topup.id]))
    try:
        session = gateway.checkout_session_create(
            topup_id=topup.id,
            tenant_id=user.tenant_id,
            amount_fen=amount_fen,
            product_name=f"Starverse top-up {format_fen(amount_fen)}",
            email=user.email,
            success_url=return_url + "?session_id={CHECKOUT_SESSION_ID}",
            cancel_url=public_url(reverse("billing:billing") + f"?cancelled={topup.id}"),
            expires_at=int(topup.expires_at.timestamp()),  # type: ignore[union-attr]
            payment_methods=[payment_method] if payment_method else enabled,
        )
    except gateway.GatewayError as error:
        TopUp.objects.filter(pk=topup.pk).update(
            status=TopUpStatus.FAILED, error_message=str(error)
        )
        logger.error("topup.checkout_failed topup=%s error=%s", topup.id, type(error).__name__)
        raise ServiceUnavailable(
            _("The payment provider could not be reached. Nothing was charged; try again soon.")
        ) from error
    TopUp.objects.filter(pk=topup.pk).update(
        status=TopUpStatus.PENDING, checkout_session_id=session.id, checkout_url=session.url or ""
    )
    topup.refresh_from_db()
    logger.info("topup.created topup=%s session=%s amount_fen=%d", topup.id, session.id, amount_fen)
    return topup


def _mismatch(topup: TopUp, session: gateway.CheckoutSession) -> str:
    problems = []
    if session.livemode != settings.STRIPE_LIVEMODE:
        problems.append(f"livemode {session.livemode}")
    if session.metadata.get("tenant_id") != topup.tenant_id:
        problems.append(f"owner {session.metadata.get('tenant_id')!r} != {topup.tenant_id!r}")
    if session.amount_total != topup.amount_fen:
        problems.append(f"amount {session.amount_total} != {topup.amount_fen}")
    if session.currency != topup.currency:
        problems.append(f"currency {session.currency!r} != {topup.currency!r}")
    return "; ".join(problems)


def topup_settle_from_session(
    session: gateway.CheckoutSession, *, event_type: str = ""
) -> TopUp | None:
    """Bring a top-up in line with its Checkout Session as Stripe reports it now. Credits the
    wallet once when the session is paid and matches the top-up's amount, currency and owner;
    a mismatch credits nothing and flags the top-up for review."""
    topup = TopUp.objects.filter(
        pk=session.metadata.get("topup_id", ""), checkout_session_id=session.id
    ).first()
    if topup is None:
        logger.error("topup.unknown_session session=%s", session.id)
        return None
    problem = _mismatch(topup, session)
    if problem:
        TopUp.objects.filter(pk=topup.pk, status__in=OPEN_STATUSES).update(
            status=TopUpStatus.REVIEW, review_reason=problem
        )
        logger.error("topup.review topup=%s session=%s problem=%s", topup.id, session.id, problem)
    elif session.payment_status in ("paid", "no_payment_required"):
        _topup_credit(topup, session)
    elif event_type == "checkout.session.async_payment_failed":
        TopUp.objects.filter(pk=topup.pk, status__in=OPEN_STATUSES).update(
            status=TopUpStatus.FAILED, error_message="The payment did not go through."
        )
    elif session.status == "expired":
        _topup_expire(topup, session)
    elif session.status == "complete":
        TopUp.objects.filter(
            pk=topup.pk, status__in=(TopUpStatus.CREATED, TopUpStatus.PENDING)
        ).update(status=TopUpStatus.PROCESSING)
    topup.refresh_from_db()
    return topup


def _topup_paid(topup: TopUp) -> dict[str, object]:
    """What `topup.paid` says: the top-up, its amount and how it was paid."""
    return {
        "id": topup.id,
        "amount_fen": topup.amount_fen,
        "amount": format_fen(topup.amount_fen),
        "method": topup.method,
        "url": "/billing/",
    }


def _topup_credit(topup: TopUp, session: gateway.CheckoutSession) -> None:
    """Credit a paid top-up once (the ledger key of its session), recording how it was paid."""
    paid_with = session.payment_method_type if session.payment_method_type in PaidWith else ""
    with transaction.atomic():
        txn = ledger_post(
            wallet_id=topup.wallet_id,
            key=f"topup:{session.id}",
            kind=TransactionKind.TOPUP,
            amount_fen=topup.amount_fen,
            description=TOPUP_DESCRIPTIONS.get(paid_with, gettext_noop("Top-up")),
        )
        credited = TopUp.objects.filter(pk=topup.pk, ledger_transaction__isnull=True).update(
            status=TopUpStatus.PAID,
            paid_at=timezone.now(),
            ledger_transaction=txn,
            payment_intent_id=session.payment_intent or "",
            paid_with=paid_with,
        )
        if credited:
            # the request was audited when its checkout opened; this is the money arriving
            audit_record(
                tenant_id=topup.tenant_id,
                actor=topup.created_by,
                action="topup.paid",
                obj=topup,
                data={"amount_fen": topup.amount_fen},
            )
            enqueue_on_commit("billing.tasks.send_topup_receipt", topup.id)
            emit(topup.tenant_id, EventType.TOPUP_PAID, _topup_paid(topup))
            wallet_credited_after_commit(topup.wallet_id, topup.amount_fen)
            logger.info("topup.paid topup=%s txn=%s", topup.id, txn.id)


def _topup_close(
    topup: TopUp, status: TopUpStatus, action: str, *, still: tuple[str, ...], actor: "User | None"
) -> bool:
    """Close a top-up that is still in one of `still` as `status`, once (a conditional update:
    the second of two closings changes nothing), and audit it as `action`."""
    closed = TopUp.objects.filter(pk=topup.pk, status__in=still).update(status=status)
    if closed:
        audit_record(
            tenant_id=topup.tenant_id,
            actor=actor,
            action=action,
            obj=topup,
            data={"amount_fen": topup.amount_fen},
        )
    return bool(closed)


def _topup_expire(topup: TopUp, session: gateway.CheckoutSession) -> None:
    """Stripe expired the session unpaid: an open top-up is expired, once, and audited."""
    if _topup_close(topup, TopUpStatus.EXPIRED, "topup.expired", still=OPEN_STATUSES, actor=None):
        logger.info("topup.expired topup=%s session=%s", topup.id, session.id)


def topup_refresh(*, topup: TopUp) -> TopUp:
    """The success page's path to the same result as the webhook: re-read the session."""
    if topup.checkout_session_id and topup.status in OPEN_STATUSES:
        try:
            session = gateway.checkout_session_retrieve(topup.checkout_session_id)
        except gateway.GatewayError:
            return topup  # the webhook will settle it
        return topup_settle_from_session(session) or topup
    return topup


# A top-up its payer may still pay or cancel: its checkout is open (not yet paid, nor being
# paid by a delayed method).
UNPAID_STATUSES = (TopUpStatus.CREATED, TopUpStatus.PENDING)


def topup_resumable(topup: TopUp) -> bool:
    """Whether its Stripe Checkout page can still be paid: unpaid, with a page, not past the
    session's expiry."""
    return (
        topup.status in UNPAID_STATUSES
        and bool(topup.checkout_url)
        and (topup.expires_at is None or topup.expires_at > timezone.now())
    )


def _not_cancellable(topup: TopUp) -> Conflict:
    return Conflict(
        _("This top-up is %(status)s; only one awaiting payment can be cancelled.")
        % {"status": topup.get_status_display()},
        code="not_cancellable",
    )


def topup_cancel(*, topup: TopUp, actor: "User") -> TopUp:
    """Cancel an unpaid top-up: expire its Checkout Session at Stripe first (so that it can no
    longer be paid), then mark it cancelled, once (a conditional update: a second cancel, or
    the `checkout.session.expired` webhook that follows, changes nothing). A session Stripe
    says is no longer open is settled as Stripe reports it instead (paid, expired …);
    Conflict when the top-up is not unpaid."""
    if topup.status not in UNPAID_STATUSES:
        if topup.status == TopUpStatus.CANCELLED:
            return topup
        raise _not_cancellable(topup)
    if topup.checkout_session_id:
        try:
            gateway.checkout_session_expire(topup.checkout_session_id)
        except gateway.PermanentGatewayError:
            # no longer open: paid or expired meanwhile; take what Stripe says
            raise _not_cancellable(topup_refresh(topup=topup)) from None
        except gateway.GatewayError as error:
            raise ServiceUnavailable(
                _("The payment provider could not be reached. Try again soon.")
            ) from error
    with transaction.atomic():
        if _topup_close(
            topup, TopUpStatus.CANCELLED, "topup.cancelled", still=UNPAID_STATUSES, actor=actor
        ):
            logger.info("topup.cancelled topup=%s by=%s", topup.id, actor.pk)
    topup.refresh_from_db()
    return topup


# --- webhooks -----------------------------------------------------------------------------


def stripe_event_receive(*, payload: bytes, signature: str) -> tuple[StripeEvent | None, bool]:
    """Verify and store a webhook event once; processing is queued after commit.
    Raises gateway.InvalidSignature or InvalidInput; returns (event, created)."""
    event = gateway.event_verify(payload, signature)
    if bool(event.get("livemode")) != settings.STRIPE_LIVEMODE:
        raise InvalidInput("livemode of the event does not match this deployment")
    if not isinstance(event.get("id"), str) or not isinstance(event.get("type"), str):
        raise InvalidInput("event without id or type")
    try:
        with transaction.atomic():
            stored = StripeEvent.objects.create(
                id=event["id"],
                type=event["type"],
                livemode=bool(event.get("livemode")),
                payload=event,
            )
            enqueue_on_commit("billing.tasks.process_stripe_event", stored.id)
    except IntegrityError:
        return StripeEvent.objects.filter(pk=event["id"]).first(), False
    logger.info("stripe.event_stored event=%s type=%s", stored.id, stored.type)
    return stored, True


# Processing attempts after which the sweep stops retrying an event: it then waits in the admin
# ("gave up") for an operator to retry it by hand.
STRIPE_EVENT_MAX_ATTEMPTS = 8


def stripe_event_process(*, event_id: str) -> None:
    """Apply one stored event. Safe to run any number of times, concurrently or after a crash
    at any point: each effect is keyed or a conditional update. A failure is recorded on the
    event (`error`) and raised again for the task's retry policy."""
    event = StripeEvent.objects.filter(pk=event_id, processed_at__isnull=True).first()
    if event is None:
        return
    StripeEvent.objects.filter(pk=event_id).update(attempts=F("attempts") + 1)
    try:
        _stripe_event_apply(event)
    except Exception as error:
        StripeEvent.objects.filter(pk=event_id, processed_at__isnull=True).update(
            error=f"{type(error).__name__}: {error}"[:2000]
        )
        attempts = event.attempts + 1
        log = logger.error if attempts >= STRIPE_EVENT_MAX_ATTEMPTS else logger.warning
        log(
            "stripe.event_failed event=%s type=%s attempts=%d gave_up=%s error=%s",
            event_id,
            event.type,
            attempts,
            attempts >= STRIPE_EVENT_MAX_ATTEMPTS,
            type(error).__name__,
        )
        raise
    StripeEvent.objects.filter(pk=event_id, processed_at__isnull=True).update(
        processed_at=timezone.now(), error=""
    )


def _stripe_event_apply(event: StripeEvent) -> None:
    obj = event.payload.get("data", {}).get("object", {})
    if event.type.startswith("checkout.session."):
        session = gateway.checkout_session_retrieve(obj["id"])
        topup_settle_from_session(session, event_type=event.type)
    elif event.type in ("refund.updated", "refund.failed", "refund.created"):
        _refund_apply(gateway.refund_from(obj), event_id=event.id)
    elif event.type == "charge.refunded":
        for item in (obj.get("refunds") or {}).get("data", []):
            _refund_apply(gateway.refund_from(item), event_id=event.id)
    elif event.type.startswith("charge.dispute."):
        dispute_apply(remote=gateway.dispute_from(obj), event_id=event.id, event_type=event.type)


def stripe_events_retry(*, event_ids: list[str], actor: "User") -> int:
    """An operator's retry of unprocessed events, whatever their attempts (the cap stops only
    the automatic sweep). Returns how many were queued."""
    _require_staff(actor)
    ids = list(
        StripeEvent.objects.filter(pk__in=event_ids, processed_at__isnull=True).values_list(
            "id", flat=True
        )
    )
    for event_id in ids:
        enqueue_on_commit("billing.tasks.process_stripe_event", event_id)
    logger.info("stripe.events_retried count=%d by=%s", len(ids), actor.pk)
    return len(ids)


# --- refunds ------------------------------------------------------------------------------


def _refundable_fen(topup: TopUp) -> int:
    taken = (
        topup.refunds.exclude(status=RefundStatus.FAILED).aggregate(s=Sum("amount_fen"))["s"] or 0
    )
    return topup.amount_fen - taken


def refund_request(*, topup_id: str, amount_fen: int, reason: str, actor: "User") -> Refund:
    """Refund unspent cash of a paid online top-up: reserve it from the wallet's cash (trial
    money is never refundable), then ask Stripe with the refund's idempotency key."""
    _require_staff(actor)
    reason = _require_reason(reason)
    if isinstance(amount_fen, bool) or not isinstance(amount_fen, int) or amount_fen <= 0:
        raise InvalidInput(_("The refund amount must be a positive number of fen."))
    with transaction.atomic():
        topup = TopUp.objects.select_for_update().get(pk=topup_id)
        if topup.method != TopUpMethod.STRIPE or topup.status != TopUpStatus.PAID:
            raise Conflict(_("Only paid online top-ups can be refunded through Stripe."))
        refundable = _refundable_fen(topup)
        if amount_fen > refundable:
            raise InvalidInput(
                _("At most %(amount)s of this top-up can still be refunded.")
                % {"amount": format_fen(refundable)}
            )
        refund_id = new_id("rfd")
        reserve = ledger_post(
            wallet_id=topup.wallet_id,
            key=f"refund:{refund_id}:reserve",
            kind=TransactionKind.REFUND,
            amount_fen=-amount_fen,
            description=gettext_noop("Refund"),
            reason=reason,
            actor=actor,
        )
        refund = Refund.objects.create(
            id=refund_id,
            topup=topup,
            amount_fen=amount_fen,
            reason=reason,
            requested_by=actor,
            reserve_transaction=reserve,
        )
    logger.info("refund.reserved refund=%s topup=%s amount_fen=%d", refund.id, topup.id, amount_fen)
    return refund_submit(refund_id=refund.id)


def refund_submit(*, refund_id: str) -> Refund:
    """Create the refund at Stripe (idempotent by the refund's id). A retryable failure leaves
    it pending for the retry task; a permanent one releases the reserved money."""
    refund = Refund.objects.select_related("topup").get(pk=refund_id)
    if refund.status != RefundStatus.PENDING or refund.stripe_refund_id:
        return refund
    try:
        remote = gateway.refund_create(
            refund_id=refund.id,
            payment_intent=refund.topup.payment_intent_id,
            amount_fen=refund.amount_fen,
        )
    except gateway.RetryableGatewayError:
        enqueue_on_commit("billing.tasks.submit_refund", refund.id, countdown=60)
        return refund
    except gateway.PermanentGatewayError as error:
        return refund_release(refund_id=refund.id, error=str(error))
    Refund.objects.filter(pk=refund.pk, stripe_refund_id__isnull=True).update(
        stripe_refund_id=remote.id
    )
    _refund_apply(remote)
    refund.refresh_from_db()
    return refund


def _refund_apply(remote: gateway.Refund, *, event_id: str = "") -> None:
    refund = Refund.objects.filter(
        Q(stripe_refund_id=remote.id) | Q(pk=remote.metadata.get("refund_id", ""))
    ).first()
    if refund is None and not remote.metadata.get("refund_id"):
        # Not asked for here (ours carry their id): made in the Stripe dashboard.
        dashboard_refund_record(remote, event_id=event_id)
        return
    if refund is None:
        logger.error("refund.unknown stripe_refund=%s", remote.id)
        return
    if remote.status == "succeeded":
        refund_settle(refund_id=refund.id)
    elif remote.status in ("failed", "canceled"):
        refund_release(refund_id=refund.id, error=f"Stripe reported the refund {remote.status}.")


def dashboard_refund_record(remote: gateway.Refund, *, event_id: str) -> Refund | None:
    """A refund made in the Stripe dashboard, not through refund_request: once Stripe reports
    it succeeded, record it (source dashboard) and debit the wallet its amount, cash first and
    the rest into arrears, exactly once per Stripe refund (the unique refund id and the ledger
    key `refund:{stripe refund}`). Arrears hold the tenant; the operators are told either way.
    None while it is not through, or when it is not a top-up's payment."""
    if remote.status != "succeeded":
        return None
    topup = topup_for_charge(payment_intent=remote.payment_intent, charge=remote.charge)
    if topup is None or topup.ledger_transaction_id is None:
        logger.error(
            "refund.dashboard_unmatched stripe_refund=%s charge=%s topup=%s",
            remote.id,
            remote.charge,
            topup.id if topup else None,
        )
        return None
    reason = f"Refunded in the Stripe dashboard: {remote.id} of top-up {topup.id}, event {event_id}"
    try:
        with transaction.atomic():
            refund = _dashboard_refund_post(remote, topup, reason=reason)
    except (IntegrityError, IdempotencyConflict):
        # Another event about the same refund recorded it first.
        existing = Refund.objects.filter(stripe_refund_id=remote.id).first()
        if existing is None:
            raise
        return existing
    logger.warning(
        "billing.dashboard_refund refund=%s stripe_refund=%s tenant=%s topup=%s amount_fen=%d "
        "debit=%s arrears=%s event=%s",
        refund.id,
        remote.id,
        topup.tenant_id,
        topup.id,
        remote.amount,
        refund.reserve_transaction_id,
        refund.arrears_transaction_id,
        event_id,
    )
    return refund


def _dashboard_refund_post(remote: gateway.Refund, topup: TopUp, *, reason: str) -> Refund:
    """Inside dashboard_refund_record's transaction: the wallet's debit (cash first, the rest
    into arrears), the refund row that records it, the hold that arrears call for, and the
    operators' notice once it commits. A second event about the same refund stops here (on
    the ledger key or the unique refund id), and the caller's transaction undoes the rest."""
    debit, owed = arrears_debit_post(
        wallet_id=topup.wallet_id,
        key=f"refund:{remote.id}",
        kind=TransactionKind.REFUND,
        amount_fen=remote.amount,
        description=gettext_noop("Refund"),
        reason=reason,
    )
    refund = Refund.objects.create(
        topup=topup,
        amount_fen=remote.amount,
        status=RefundStatus.SUCCEEDED,
        source=RefundSource.DASHBOARD,
        stripe_refund_id=remote.id,
        reason=reason,
        reserve_transaction=debit,
        arrears_transaction=owed,
        settled_at=timezone.now(),
    )
    if owed is not None:
        hold_place(
            tenant_id=topup.tenant_id,
            key=f"refund:{remote.id}",
            reason=f"A refund of top-up {topup.id} made in the Stripe dashboard "
            f"({remote.id}) left the wallet {format_fen(owed.arrears_delta_fen)} in "
            "arrears.",
            refund=refund,
        )
    enqueue_on_commit("billing.tasks.send_refund_notice", refund.id)
    return refund


def refund_settle(*, refund_id: str) -> bool:
    """The refund went through: the reserved money stays out. True only the first time."""
    settled = Refund.objects.filter(pk=refund_id, status=RefundStatus.PENDING).update(
        status=RefundStatus.SUCCEEDED, settled_at=timezone.now()
    )
    if settled:
        logger.info("refund.settled refund=%s", refund_id)
    return bool(settled)


def refund_release(*, refund_id: str, error: str) -> Refund:
    """The refund failed: give the reserved money back by reversing the reservation, once."""
    with transaction.atomic():
        refund = Refund.objects.select_for_update().get(pk=refund_id)
        if refund.status != RefundStatus.PENDING:
            return refund
        release = transaction_reverse(
            transaction_id=refund.reserve_transaction_id,
            reason=f"Refund failed: {error}",
            actor=None,
        )
        refund.status, refund.error_message = RefundStatus.FAILED, error
        refund.release_transaction, refund.settled_at = release, timezone.now()
        refund.save(update_fields=["status", "error_message", "release_transaction", "settled_at"])
    logger.warning("refund.released refund=%s error=%s", refund_id, error)
    return refund


# --- operator postings --------------------------------------------------------------------


def bank_transfer_post(
    *, wallet_id: str, amount_fen: int, payer: str, reference: str, reason: str, actor: "User"
) -> TopUp:
    """Credit a bank transfer (对公汇款) the operator has seen arrive. The bank reference is
    unique: the same transfer cannot be posted twice."""
    _require_staff(actor)
    reason = _require_reason(reason)
    payer, reference = payer.strip(), reference.strip()
    if not payer or not reference:
        raise InvalidInput(_("The payer and the bank reference are required."))
    wallet = Wallet.objects.get(pk=wallet_id)
    try:
        with transaction.atomic():
            topup = TopUp.objects.create(
                tenant_id=wallet.tenant_id,
                wallet=wallet,
                created_by=actor,
                method=TopUpMethod.BANK_TRANSFER,
                amount_fen=amount_fen,
                status=TopUpStatus.PAID,
                bank_reference=reference,
                payer=payer,
                reason=reason,
                paid_at=timezone.now(),
            )
            txn = ledger_post(
                wallet_id=wallet.id,
                key=f"bank:{reference}",
                kind=TransactionKind.BANK_TRANSFER,
                amount_fen=amount_fen,
                description=gettext_noop("Bank transfer"),
                reason=f"{payer} / {reference}: {reason}",
                actor=actor,
            )
            TopUp.objects.filter(pk=topup.pk).update(ledger_transaction=txn)
            enqueue_on_commit("billing.tasks.send_topup_receipt", topup.id)
            emit(topup.tenant_id, EventType.TOPUP_PAID, _topup_paid(topup))
            wallet_credited_after_commit(wallet.id, amount_fen)
    except IntegrityError:
        raise Conflict(
            _("Bank reference %(ref)s was already posted.") % {"ref": reference}, code="duplicate"
        ) from None
    topup.refresh_from_db()
    return topup


OPERATOR_POSTING_KINDS = (
    TransactionKind.ADJUSTMENT,
    TransactionKind.BANK_TRANSFER,
    TransactionKind.REVERSAL,
)


def operator_posted_today_fen(actor: "User") -> int:
    """What the operator posted today (days in TIME_ZONE) by adjustments, bank transfers and
    reversals, either sign counted as its size."""
    local = timezone.localtime()
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    total = LedgerTransaction.objects.filter(
        created_by_id=actor.pk, kind__in=OPERATOR_POSTING_KINDS, created_at__gte=start
    ).aggregate(total=Sum(Abs("amount_fen")))["total"]
    return int(total or 0)


def _check_daily_cap(actor: "User", amount_fen: int) -> None:
    """Refuse a posting that takes the operator's postings today over ADMIN_DAILY_CAP_FEN, so
    that one large posting cannot be split into many under the approval threshold. Holds the
    operator's row lock until the surrounding transaction ends, so that two postings by the
    same operator are counted one after the other."""
    get_user_model().objects.select_for_update().filter(pk=actor.pk).first()
    done = operator_posted_today_fen(actor)
    cap = settings.ADMIN_DAILY_CAP_FEN
    if done + abs(amount_fen) > cap:
        raise InvalidInput(
            _(
                "You have posted %(done)s today; %(amount)s more would pass your daily cap of "
                "%(cap)s. Ask a second operator to post it, or wait until tomorrow."
            )
            % {
                "done": format_fen(done),
                "amount": format_fen(abs(amount_fen)),
                "cap": format_fen(cap),
            },
            code="daily_cap",
        )


def _needs_approval(amount_fen: int) -> bool:
    return abs(amount_fen) > settings.ADJUSTMENT_APPROVAL_THRESHOLD_FEN


def _approval_request(
    *,
    kind: str,
    wallet_id: str,
    amount_fen: int,
    reason: str,
    actor: "User",
    payload: dict[str, Any],
) -> AdjustmentRequest:
    request = AdjustmentRequest.objects.create(
        kind=kind,
        wallet_id=wallet_id,
        amount_fen=amount_fen,
        reason=reason,
        requested_by=actor,
        payload=payload,
    )
    logger.info(
        "approval.requested request=%s kind=%s amount_fen=%d by=%s",
        request.id,
        kind,
        amount_fen,
        actor.pk,
    )
    return request


def adjustment_request(
    *, wallet_id: str, amount_fen: int, reason: str, actor: "User"
) -> LedgerTransaction | AdjustmentRequest:
    """Post an adjustment at once if it is within the threshold (and the operator's daily cap);
    above it, record a request that a second operator must approve."""
    _require_staff(actor)
    reason = _require_reason(reason)
    if _needs_approval(amount_fen):
        return _approval_request(
            kind=AdjustmentRequest.Kind.ADJUSTMENT,
            wallet_id=wallet_id,
            amount_fen=amount_fen,
            reason=reason,
            actor=actor,
            payload={},
        )
    with transaction.atomic():
        _check_daily_cap(actor, amount_fen)
        return adjustment_post(
            wallet_id=wallet_id, amount_fen=amount_fen, reason=reason, actor=actor
        )


def bank_transfer_request(
    *, wallet_id: str, amount_fen: int, payer: str, reference: str, reason: str, actor: "User"
) -> TopUp | AdjustmentRequest:
    """Post a bank transfer at once if it is within the threshold (and the operator's daily
    cap); above it, record a request that a second operator must approve."""
    _require_staff(actor)
    reason = _require_reason(reason)
    payer, reference = payer.strip(), reference.strip()
    if not payer or not reference:
        raise InvalidInput(_("The payer and the bank reference are required."))
    waiting = AdjustmentRequest.objects.filter(
        kind=AdjustmentRequest.Kind.BANK_TRANSFER,
        status=ApprovalStatus.PENDING,
        payload__reference=reference,
    )
    if TopUp.objects.filter(bank_reference=reference).exists() or waiting.exists():
        raise Conflict(
            _("Bank reference %(ref)s was already posted.") % {"ref": reference}, code="duplicate"
        )
    if _needs_approval(amount_fen):
        return _approval_request(
            kind=AdjustmentRequest.Kind.BANK_TRANSFER,
            wallet_id=wallet_id,
            amount_fen=amount_fen,
            reason=reason,
            actor=actor,
            payload={"payer": payer, "reference": reference},
        )
    with transaction.atomic():
        _check_daily_cap(actor, amount_fen)
        return bank_transfer_post(
            wallet_id=wallet_id,
            amount_fen=amount_fen,
            payer=payer,
            reference=reference,
            reason=reason,
            actor=actor,
        )


def reversal_request(
    *, transaction_id: str, reason: str, actor: "User"
) -> LedgerTransaction | AdjustmentRequest:
    """Reverse a transaction at once if it is within the threshold (and the operator's daily
    cap); above it, record a request that a second operator must approve."""
    _require_staff(actor)
    reason = _require_reason(reason)
    original = LedgerTransaction.objects.get(pk=transaction_id)
    if _needs_approval(original.amount_fen):
        transaction_reversible_check(original)
        if LedgerTransaction.objects.filter(reverses=original).exists():
            raise Conflict(_("Transaction %(id)s is already reversed.") % {"id": original.id})
        return _approval_request(
            kind=AdjustmentRequest.Kind.REVERSAL,
            wallet_id=original.wallet_id,
            amount_fen=-original.amount_fen,
            reason=reason,
            actor=actor,
            payload={"transaction": original.id},
        )
    with transaction.atomic():
        _check_daily_cap(actor, original.amount_fen)
        return transaction_reverse(transaction_id=original.id, reason=reason, actor=actor)


def _approved_posting(request: AdjustmentRequest, actor: "User") -> LedgerTransaction:
    reason = f"{request.reason} (approved by {actor.email})"
    if request.kind == AdjustmentRequest.Kind.BANK_TRANSFER:
        topup = bank_transfer_post(
            wallet_id=request.wallet_id,
            amount_fen=request.amount_fen,
            payer=request.payload["payer"],
            reference=request.payload["reference"],
            reason=reason,
            actor=request.requested_by,
        )
        assert topup.ledger_transaction is not None  # linked in the same transaction
        return topup.ledger_transaction
    if request.kind == AdjustmentRequest.Kind.REVERSAL:
        return transaction_reverse(
            transaction_id=request.payload["transaction"],
            reason=reason,
            actor=request.requested_by,
        )
    return adjustment_post(
        wallet_id=request.wallet_id,
        amount_fen=request.amount_fen,
        reason=reason,
        actor=request.requested_by,
        key=f"adj:{request.id}",
    )


def adjustment_decide(*, request_id: str, approve: bool, actor: "User") -> AdjustmentRequest:
    """Approve (post) or reject a pending request (an adjustment, a bank transfer or a
    reversal); the decider must be another operator."""
    _require_staff(actor)
    with transaction.atomic():
        request = AdjustmentRequest.objects.select_for_update().get(pk=request_id)
        if request.status != ApprovalStatus.PENDING:
            raise Conflict(_("This request was already decided."))
        if request.requested_by_id == actor.pk:
            raise InvalidInput(_("A second operator must approve an adjustment you requested."))
        if approve:
            request.ledger_transaction = _approved_posting(request, actor)
        request.status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
        request.decided_by, request.decided_at = actor, timezone.now()
        request.save(update_fields=["status", "decided_by", "decided_at", "ledger_transaction"])
    return request
