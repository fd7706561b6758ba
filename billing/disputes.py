"""Chargebacks: a card holder disputes a top-up's payment at their bank, and Stripe takes the
disputed amount (and its fee) from the platform when the dispute is opened — `created` for a
dispute, `funds_withdrawn` when an inquiry escalates. The wallet that was credited is debited the
disputed amount then, cash first and the rest into arrears; a won dispute (`funds_reinstated`,
or `closed` with status won) credits it back. The dispute fee is the platform's cost.

Events may come in any order and any number of times: each is applied to the Dispute row under
its lock, the dispute's status only moves forward, and the debit (`dispute:{id}`) and the
credit (`dispute-won:{id}`) are ledger keys, so the money moves at most once each way."""

import logging

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing import stripe_gateway as gateway
from billing.choices import DISPUTE_CLOSED, DISPUTE_NO_WITHDRAWAL, DisputeStatus, TransactionKind
from billing.holds import hold_place
from billing.models import Dispute, TopUp
from billing.services import arrears_debit_post, ledger_post, wallet_credited_after_commit
from starverse.core.dispatch import enqueue_on_commit

logger = logging.getLogger(__name__)
FUNDS_WITHDRAWN = "charge.dispute.funds_withdrawn"
FUNDS_REINSTATED = "charge.dispute.funds_reinstated"


def topup_for_charge(*, payment_intent: str | None, charge: str | None) -> TopUp | None:
    """The online top-up a Stripe charge paid, by its PaymentIntent, else by the charge id (asking
    Stripe for the charge's PaymentIntent the first time); the charge id is kept on the top-up."""
    topup = None
    if payment_intent:
        topup = TopUp.objects.filter(payment_intent_id=payment_intent).first()
    if topup is None and charge:
        topup = TopUp.objects.filter(charge_id=charge).first()
        if topup is None:
            intent = gateway.charge_payment_intent(charge)
            topup = TopUp.objects.filter(payment_intent_id=intent).first() if intent else None
    if topup is not None and charge and not topup.charge_id:
        TopUp.objects.filter(pk=topup.pk, charge_id="").update(charge_id=charge)
    return topup


def _status_after(current: str, reported: str) -> str:
    """A closed status is final: a late event about the open dispute does not reopen it."""
    if current in DISPUTE_CLOSED and reported not in DISPUTE_CLOSED:
        return current
    return reported


def dispute_apply(*, remote: gateway.Dispute, event_id: str, event_type: str) -> Dispute | None:
    """Bring the platform in line with a dispute as one event reports it: record it (and hold
    the tenant, and tell the operators) the first time, debit once when Stripe has taken the
    money, credit back once when Stripe has given it back. None if it is not a top-up's."""
    topup = topup_for_charge(payment_intent=remote.payment_intent, charge=remote.charge)
    if topup is None:
        logger.error(
            "billing.dispute_unmatched stripe_dispute=%s charge=%s event=%s",
            remote.id,
            remote.charge,
            event_id,
        )
        return None
    with transaction.atomic():
        dispute, created = _dispute_locked(remote, topup, event_id=event_id)
        was_open = dispute.is_open and not created
        dispute.status = _status_after(dispute.status, remote.status)
        dispute.last_event_id = event_id
        if not dispute.is_open and dispute.closed_at is None:
            dispute.closed_at = timezone.now()
        _move_money(dispute, topup, event_id=event_id, event_type=event_type)
        dispute.save(
            update_fields=[
                "status",
                "last_event_id",
                "closed_at",
                "debit_transaction",
                "arrears_transaction",
                "credit_transaction",
            ]
        )
        if created:
            hold_place(
                tenant_id=topup.tenant_id,
                key=f"dispute:{remote.id}",
                reason=f"Payment of top-up {topup.id} disputed at the bank: Stripe dispute "
                f"{remote.id} ({remote.reason or 'no reason given'}).",
                dispute=dispute,
            )
        if created or (was_open and not dispute.is_open):
            enqueue_on_commit("billing.tasks.send_dispute_notice", dispute.id)
    _dispute_log(dispute, remote, topup, event_id=event_id, event_type=event_type, created=created)
    return dispute


def _dispute_locked(
    remote: gateway.Dispute, topup: TopUp, *, event_id: str
) -> tuple[Dispute, bool]:
    """Inside dispute_apply's transaction: the dispute's row, made from this event if it is
    the first (and then True), locked so that concurrent events about one dispute apply in
    turn."""
    _row, created = Dispute.objects.get_or_create(
        stripe_dispute_id=remote.id,
        defaults={
            "topup": topup,
            "amount_fen": remote.amount,
            "currency": remote.currency,
            "status": remote.status,
            "reason": remote.reason,
            "last_event_id": event_id,
        },
    )
    return Dispute.objects.select_for_update().get(stripe_dispute_id=remote.id), created


def _dispute_log(
    dispute: Dispute,
    remote: gateway.Dispute,
    topup: TopUp,
    *,
    event_id: str,
    event_type: str,
    created: bool,
) -> None:
    """One line per applied event, with the money it moved: what the operators read when a
    tenant asks about a chargeback."""
    logger.warning(
        "billing.dispute event=%s type=%s dispute=%s stripe_dispute=%s tenant=%s topup=%s "
        "amount_fen=%d status=%s new=%s debit=%s arrears=%s credit=%s",
        event_id,
        event_type,
        dispute.id,
        remote.id,
        topup.tenant_id,
        topup.id,
        dispute.amount_fen,
        dispute.status,
        created,
        dispute.debit_transaction_id,
        dispute.arrears_transaction_id,
        dispute.credit_transaction_id,
    )


def _move_money(dispute: Dispute, topup: TopUp, *, event_id: str, event_type: str) -> None:
    """Inside dispute_apply, under the dispute's lock: the debit once Stripe has withdrawn the
    money, the credit once it has reinstated it. Only for a top-up that was credited, and in
    its currency."""
    if topup.ledger_transaction_id is None or dispute.currency != topup.currency:
        logger.error(
            "billing.dispute_not_debited dispute=%s topup=%s currency=%s topup_status=%s",
            dispute.id,
            topup.id,
            dispute.currency,
            topup.status,
        )
        return
    reinstated = event_type == FUNDS_REINSTATED or dispute.status == DisputeStatus.WON
    withdrawn = (
        reinstated or event_type == FUNDS_WITHDRAWN or dispute.status not in DISPUTE_NO_WITHDRAWAL
    )
    audit = f"Stripe dispute {dispute.stripe_dispute_id} on top-up {topup.id}, event {event_id}"
    if withdrawn and dispute.debit_transaction_id is None:
        debit, owed = arrears_debit_post(
            wallet_id=topup.wallet_id,
            key=f"dispute:{dispute.stripe_dispute_id}",
            kind=TransactionKind.CHARGEBACK,
            amount_fen=dispute.amount_fen,
            description=gettext_noop("Chargeback: payment disputed at the bank"),
            reason=f"{audit} ({dispute.reason or 'no reason given'})",
        )
        dispute.debit_transaction, dispute.arrears_transaction = debit, owed
    if reinstated and dispute.credit_transaction_id is None:
        dispute.credit_transaction = ledger_post(
            wallet_id=topup.wallet_id,
            key=f"dispute-won:{dispute.stripe_dispute_id}",
            kind=TransactionKind.CHARGEBACK,
            amount_fen=dispute.amount_fen,
            description=gettext_noop("Chargeback returned: dispute won"),
            reason=audit,
        )
        wallet_credited_after_commit(topup.wallet_id, dispute.amount_fen)
