"""Thin Celery tasks: they take ids, re-read rows and call a service. Retries only for
retryable gateway errors, with exponential backoff, jitter and a cap."""

import logging
import time
from datetime import date, timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from billing import notices, payments, statements
from billing.models import StripeEvent
from billing.selectors import unbalanced_transactions, wallet_drifts
from billing.stripe_gateway import RetryableGatewayError
from starverse.core import metrics
from starverse.core.kube import TaskRetry

logger = logging.getLogger(__name__)
# Spread into shared_task as a TypedDict, it keeps the decorator's typed overloads.
RETRY: TaskRetry = {
    "autoretry_for": (RetryableGatewayError,),
    "retry_backoff": 5,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": 8,
}


@shared_task(acks_late=True, ignore_result=True, **RETRY)
def process_stripe_event(event_id: str) -> None:
    payments.stripe_event_process(event_id=event_id)


@shared_task(acks_late=True, ignore_result=True)
def submit_refund(refund_id: str) -> None:
    payments.refund_submit(refund_id=refund_id)


@shared_task(acks_late=True, ignore_result=True)
def send_topup_receipt(topup_id: str) -> None:
    notices.topup_receipt_send(topup_id=topup_id)


@shared_task(acks_late=True, ignore_result=True)
def send_dispute_notice(dispute_id: str) -> None:
    notices.dispute_notice_send(dispute_id=dispute_id)


@shared_task(acks_late=True, ignore_result=True)
def send_refund_notice(refund_id: str) -> None:
    notices.dashboard_refund_notice_send(refund_id=refund_id)


@shared_task(acks_late=True, ignore_result=True)
def retry_unprocessed_events() -> None:
    """Events whose processing crashed or outlived its retries are picked up again, until
    they reach STRIPE_EVENT_MAX_ATTEMPTS; then they wait for an operator (the admin's "gave
    up" filter and retry action). Like every reconcile loop it runs every
    RECONCILE_INTERVAL_S and takes what is RECONCILE_STUCK_AFTER_S old: a paid top-up whose
    task was lost (a worker killed, the broker flushed after Stripe had its 200) is credited
    a minute or two later, not ten (processing is idempotent: a second run credits nothing)."""
    stale = timezone.now() - timedelta(seconds=settings.RECONCILE_STUCK_AFTER_S)
    for event_id in StripeEvent.objects.filter(
        processed_at__isnull=True,
        received_at__lt=stale,
        attempts__lt=payments.STRIPE_EVENT_MAX_ATTEMPTS,
    ).values_list("id", flat=True)[:100]:
        process_stripe_event.delay(event_id)


@shared_task(acks_late=True, ignore_result=True)
def audit_wallets() -> None:
    """Hourly proof that cached balances equal the ledger; drift is logged as an error."""
    drifts = wallet_drifts()
    for d in drifts:
        logger.error(
            "billing.audit.drift wallet=%s cash_fen=%d ledger_cash_fen=%d promo_fen=%d "
            "ledger_promo_fen=%d arrears_fen=%d ledger_arrears_fen=%d",
            d.wallet_id,
            d.cash_fen,
            d.ledger_cash_fen,
            d.promo_fen,
            d.ledger_promo_fen,
            d.arrears_fen,
            d.ledger_arrears_fen,
        )
    unbalanced = unbalanced_transactions()
    for txn in unbalanced:
        logger.error("billing.audit.unbalanced transaction=%s", txn)
    logger.info("billing.audit wallets_drifting=%d unbalanced=%d", len(drifts), len(unbalanced))
    # Prometheus alerts on drift (deploy/prometheus/alerts.yaml) from the worker's metrics.
    metrics.record_audit(len(drifts), len(unbalanced), time.time())


@shared_task(acks_late=True, ignore_result=True)
def send_invoice_notice(invoice_id: str) -> None:
    notices.invoice_notice_send(invoice_id=invoice_id)


@shared_task(acks_late=True, ignore_result=True)
def generate_statements() -> None:
    """On the 1st (beat): last month's statements for every tenant with activity or a balance,
    one task each (generate_statement), so that the workers draw them side by side and an
    account whose statement fails is retried on its own. Safe to run again: only tenants
    without a statement get a task, and a statement made before is kept."""
    month = statements.last_month()
    due = statements.tenants_without_statement(month)
    for tenant_id in due:
        generate_statement.delay(tenant_id, month.isoformat())
    logger.info("statement.month month=%s queued=%d", f"{month:%Y-%m}", len(due))


@shared_task(
    acks_late=True,
    ignore_result=True,
    autoretry_for=(Exception,),
    retry_backoff=60,
    retry_backoff_max=3600,
    max_retries=5,
)
def generate_statement(tenant_id: str, month: str) -> None:
    """One tenant's statement of a closed month (ISO date of its first day). A failure (the
    media storage away, say) is retried with backoff; after the last, the statement is drawn
    on its first request instead."""
    statements.statement_generate(tenant_id=tenant_id, month=date.fromisoformat(month))
