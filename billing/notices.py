"""E-mails about money: the receipt of a top-up; the runway warnings (balance ÷ current hourly
spend below one hour, then below ten minutes), each once per crossing, as the `balance.low`
event (heard through the channels, like every notice); and to the
operators (OPERATOR_EMAILS, else the active superusers), chargebacks and refunds made in the
Stripe dashboard."""

import logging
from collections.abc import Mapping
from typing import NamedTuple

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Q
from django.template.loader import render_to_string
from django.utils import timezone, translation

from billing.choices import InvoiceStatus, RunwayLevel
from billing.models import (
    Dispute,
    InvoiceRequest,
    LedgerTransaction,
    Refund,
    RunwayNotice,
    TopUp,
    Wallet,
)
from events.choices import EventType
from events.emit import emit
from starverse.accounts.models import Role, User
from starverse.core.adminurls import admin_change_url
from starverse.core.links import public_url
from starverse.core.money import format_fen

logger = logging.getLogger(__name__)
MAIL_LANGUAGES = ("zh-hans", "en")


def _bilingual(template: str, context: Mapping[str, object]) -> tuple[str, str]:
    """Subject and body in Simplified Chinese then English: users read either."""
    parts, subjects = [], []
    for language in MAIL_LANGUAGES:
        with translation.override(language):
            text = render_to_string(template, context).strip()
        subject, _blank, body = text.partition("\n")
        subjects.append(subject.strip())
        parts.append(body.strip())
    return " / ".join(subjects), "\n\n----------\n\n".join(parts)


# Who reads a team's money mail: the people who can act on it (top up, change budgets).
MONEY_ROLES = (Role.OWNER, Role.ADMIN, Role.BILLING)


# Who reads mail about one instance: the people who can act on it (Keep running, start it
# again): whoever ordered it and the team's owners and admins.
MANAGER_ROLES = (Role.OWNER, Role.ADMIN)


def _recipients(
    tenant_id: str, roles: tuple[str, ...] = MONEY_ROLES, user_id: str | None = None
) -> list[str]:
    """A personal account's person; a team's members in `roles`, and `user_id` if still a
    member."""
    people = Q(memberships__tenant_id=tenant_id, memberships__role__in=roles)
    if user_id is not None:
        people |= Q(pk=user_id, memberships__tenant_id=tenant_id)
    return list(
        User.objects.filter(Q(tenant_id=tenant_id) | people, is_active=True)
        .values_list("email", flat=True)
        .distinct()
    )


def mail_tenant(tenant_id: str, template: str, context: Mapping[str, object]) -> None:
    """Send a bilingual money notice to a tenant's payers."""
    subject, body = _bilingual(template, {"console_url": public_url(), **context})
    send_mail(subject, body, None, _recipients(tenant_id))


def mail_about_instance(
    tenant_id: str, orderer_id: str | None, template: str, context: Mapping[str, object]
) -> None:
    """Send a bilingual notice about one instance to whoever ordered it and, in a team, its
    owners and admins (a billing member can do nothing about it)."""
    subject, body = _bilingual(template, {"console_url": public_url(), **context})
    send_mail(subject, body, None, _recipients(tenant_id, MANAGER_ROLES, orderer_id))


def topup_receipt_send(*, topup_id: str) -> None:
    topup = TopUp.objects.select_related("ledger_transaction").get(pk=topup_id)
    if topup.ledger_transaction is None:
        return
    txn = topup.ledger_transaction
    subject, body = _bilingual(
        "billing/email/topup_receipt.txt",
        {
            "topup": topup,
            "balance_after_fen": txn.balance_after_fen,
            "console_url": public_url(),
        },
    )
    send_mail(subject, body, None, _recipients(topup.tenant_id))
    logger.info("notice.receipt topup=%s", topup.id)


def operator_recipients() -> list[str]:
    """OPERATOR_EMAILS, or when it is empty every active superuser's address."""
    if settings.OPERATOR_EMAILS:
        return list(settings.OPERATOR_EMAILS)
    return list(
        User.objects.filter(is_superuser=True, is_active=True)
        .exclude(email="")
        .order_by("email")
        .values_list("email", flat=True)
    )


def _mail_operators(template: str, context: Mapping[str, object], what: str) -> None:
    recipients = operator_recipients()
    if not recipients:
        logger.error("notice.operators_unreachable what=%s (set OPERATOR_EMAILS)", what)
        return
    subject, body = _bilingual(template, {"console_url": public_url(), **context})
    send_mail(subject, body, None, recipients)
    logger.info("notice.operators what=%s recipients=%d", what, len(recipients))


class _Moved(NamedTuple):
    """What a posting moved: the cash it took and the arrears it added."""

    cash_fen: int
    arrears_fen: int


def _moved(txn: LedgerTransaction | None) -> _Moved:
    """What a posting moved; a credit counts as nothing taken."""
    if txn is None:
        return _Moved(0, 0)
    return _Moved(max(-txn.cash_delta_fen, 0), max(txn.arrears_delta_fen, 0))


def dispute_notice_send(*, dispute_id: str) -> None:
    """Tell the operators a payment was disputed, or that a dispute closed, and what it moved."""
    dispute = Dispute.objects.select_related(
        "topup", "debit_transaction", "arrears_transaction", "credit_transaction"
    ).get(pk=dispute_id)
    cash_fen = _moved(dispute.debit_transaction).cash_fen
    arrears_fen = _moved(dispute.arrears_transaction).arrears_fen
    credit = dispute.credit_transaction
    _mail_operators(
        "billing/email/operator_dispute.txt",
        {
            "dispute": dispute,
            "emails": ", ".join(_recipients(dispute.topup.tenant_id)),
            "cash_fen": cash_fen,
            "arrears_fen": arrears_fen,
            "credited_fen": credit.amount_fen if credit else 0,
            "balance_fen": Wallet.objects.get(pk=dispute.topup.wallet_id).total_fen,
            "admin_url": public_url(admin_change_url("billing_dispute", dispute.id)),
        },
        f"dispute:{dispute.id}:{dispute.status}",
    )


def dashboard_refund_notice_send(*, refund_id: str) -> None:
    """Tell the operators a refund was made in the Stripe dashboard and what it debited."""
    refund = Refund.objects.select_related(
        "topup", "reserve_transaction", "arrears_transaction"
    ).get(pk=refund_id)
    cash_fen = _moved(refund.reserve_transaction).cash_fen
    _mail_operators(
        "billing/email/operator_refund.txt",
        {
            "refund": refund,
            "emails": ", ".join(_recipients(refund.topup.tenant_id)),
            "cash_fen": cash_fen,
            "arrears_fen": _moved(refund.arrears_transaction).arrears_fen,
            "balance_fen": Wallet.objects.get(pk=refund.topup.wallet_id).total_fen,
            "admin_url": public_url(admin_change_url("billing_topup", refund.topup_id)),
        },
        f"refund:{refund.id}",
    )


def runway_level(total_fen: int, spend_per_hour_fen: int) -> RunwayLevel:
    if spend_per_hour_fen <= 0:
        return RunwayLevel.OK
    # runway in minutes = total / spend_per_hour * 60, compared without division
    if total_fen * 60 < 10 * spend_per_hour_fen:
        return RunwayLevel.BELOW_TEN_MINUTES
    if total_fen < spend_per_hour_fen:
        return RunwayLevel.BELOW_HOUR
    return RunwayLevel.OK


def _balance_low(wallet: Wallet, level: RunwayLevel, minutes: int) -> dict[str, object]:
    return {
        "id": wallet.id,
        "total_fen": wallet.total_fen,
        "balance": format_fen(wallet.total_fen),
        "runway_minutes": minutes,
        "level": "below_ten_minutes" if level == RunwayLevel.BELOW_TEN_MINUTES else "below_hour",
        "url": "/billing/",
    }


def runway_notices_check(spend_per_hour_fen: dict[str, int]) -> int:
    """Compare each spending tenant's runway at its current spend per hour (by tenant id; what
    is spent is the instances app's to say) with what its wallet was last told; report
    `balance.low` when it drops to a lower level (people hear it through their channels),
    reset silently when it recovers. Returns the number of events."""
    notified = set(
        RunwayNotice.objects.exclude(level=RunwayLevel.OK).values_list("wallet_id", flat=True)
    )
    sent = 0
    wallets = Wallet.objects.filter(Q(tenant_id__in=set(spend_per_hour_fen)) | Q(pk__in=notified))
    for wallet in wallets:
        rate = spend_per_hour_fen.get(wallet.tenant_id, 0)
        level = runway_level(wallet.total_fen, rate)
        notice, _created = RunwayNotice.objects.get_or_create(wallet=wallet)
        if level > notice.level:
            minutes = wallet.total_fen * 60 // rate if rate else 0
            emit(wallet.tenant_id, EventType.BALANCE_LOW, _balance_low(wallet, level, minutes))
            sent += 1
            logger.info("notice.runway wallet=%s level=%d minutes=%d", wallet.id, level, minutes)
        if level != notice.level:
            RunwayNotice.objects.filter(pk=wallet.id).update(
                level=level, notified_at=timezone.now()
            )
    return sent


def invoice_notice_send(*, invoice_id: str) -> None:
    """Tell the tenant (and the invoice profile's address) that an invoice request was issued
    or rejected; the issued PDF is downloaded from the console, never mailed as a link to a
    public file."""
    item = InvoiceRequest.objects.get(pk=invoice_id)
    if item.status == InvoiceStatus.REQUESTED:
        return
    subject, body = _bilingual(
        "billing/email/invoice.txt", {"invoice": item, "console_url": public_url()}
    )
    recipients = _recipients(item.tenant_id)
    profile_email = str(item.profile.get("email") or "")
    if profile_email and profile_email not in recipients:
        recipients.append(profile_email)
    send_mail(subject, body, None, recipients)
    logger.info("notice.invoice invoice=%s status=%s", item.id, item.status)
