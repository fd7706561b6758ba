"""E-mails about money: the receipt of a top-up, and the runway warnings (balance ÷ current
hourly spend below one hour, then below ten minutes) — each once per crossing."""

import logging
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Sum
from django.template.loader import render_to_string
from django.utils import timezone, translation

from billing.choices import RunwayLevel, TransactionKind
from billing.models import LedgerTransaction, RunwayNotice, TopUp, Wallet

logger = logging.getLogger(__name__)
SPEND_WINDOW = timedelta(minutes=10)
MAIL_LANGUAGES = ("zh-hans", "en")


def _bilingual(template: str, context: dict) -> tuple[str, str]:
    """Subject and body in Simplified Chinese then English: users read either."""
    parts, subjects = [], []
    for language in MAIL_LANGUAGES:
        with translation.override(language):
            text = render_to_string(template, context).strip()
        subject, _blank, body = text.partition("\n")
        subjects.append(subject.strip())
        parts.append(body.strip())
    return " / ".join(subjects), "\n\n----------\n\n".join(parts)


def _recipients(tenant_id: str) -> list[str]:
    from starverse.accounts.models import User

    return list(
        User.objects.filter(tenant_id=tenant_id, is_active=True).values_list("email", flat=True)
    )


def mail_tenant(tenant_id: str, template: str, context: dict) -> None:
    """Send a bilingual notice to every active user of a tenant."""
    subject, body = _bilingual(template, {"console_url": settings.PUBLIC_BASE_URL, **context})
    send_mail(subject, body, None, _recipients(tenant_id))


def topup_receipt_send(*, topup_id: str) -> None:
    topup = TopUp.objects.select_related("ledger_transaction").get(pk=topup_id)
    if topup.ledger_transaction is None:
        return
    txn = topup.ledger_transaction
    subject, body = _bilingual(
        "billing/email/topup_receipt.txt",
        {
            "topup": topup,
            "balance_after_fen": txn.cash_after_fen + txn.promo_after_fen,
            "console_url": settings.PUBLIC_BASE_URL,
        },
    )
    send_mail(subject, body, None, _recipients(topup.tenant_id))
    logger.info("notice.receipt topup=%s", topup.id)


def hourly_spend_fen(wallet_ids: list[str] | None = None) -> dict[str, int]:
    """Current hourly spend per wallet, from usage charged in the last ten minutes."""
    since = timezone.now() - SPEND_WINDOW
    rows = LedgerTransaction.objects.filter(kind=TransactionKind.USAGE, created_at__gte=since)
    if wallet_ids is not None:
        rows = rows.filter(wallet_id__in=wallet_ids)
    scale = timedelta(hours=1) / SPEND_WINDOW
    return {
        row["wallet_id"]: int(-row["spent"] * scale)
        for row in rows.values("wallet_id").annotate(spent=Sum("amount_fen"))
        if row["spent"]
    }


def runway_level(total_fen: int, spend_per_hour_fen: int) -> RunwayLevel:
    if spend_per_hour_fen <= 0:
        return RunwayLevel.OK
    # runway in minutes = total / spend_per_hour * 60, compared without division
    if total_fen * 60 < 10 * spend_per_hour_fen:
        return RunwayLevel.BELOW_TEN_MINUTES
    if total_fen < spend_per_hour_fen:
        return RunwayLevel.BELOW_HOUR
    return RunwayLevel.OK


def runway_notices_check() -> int:
    """Compare each spending wallet's runway with what it was last told; mail when it drops
    to a lower level, reset silently when it recovers. Returns the number of mails sent."""
    spend = hourly_spend_fen()
    notified = set(
        RunwayNotice.objects.exclude(level=RunwayLevel.OK).values_list("wallet_id", flat=True)
    )
    sent = 0
    for wallet in Wallet.objects.filter(pk__in=set(spend) | notified):
        rate = spend.get(wallet.id, 0)
        level = runway_level(wallet.total_fen, rate)
        notice, _created = RunwayNotice.objects.get_or_create(wallet=wallet)
        if level > notice.level:
            minutes = wallet.total_fen * 60 // rate if rate else 0
            subject, body = _bilingual(
                "billing/email/runway.txt",
                {
                    "level": int(level),
                    "minutes": minutes,
                    "total_fen": wallet.total_fen,
                    "spend_per_hour_fen": rate,
                    "console_url": settings.PUBLIC_BASE_URL,
                },
            )
            send_mail(subject, body, None, _recipients(wallet.tenant_id))
            sent += 1
            logger.info("notice.runway wallet=%s level=%d minutes=%d", wallet.id, level, minutes)
        if level != notice.level:
            RunwayNotice.objects.filter(pk=wallet.id).update(
                level=level, notified_at=timezone.now()
            )
    return sent
