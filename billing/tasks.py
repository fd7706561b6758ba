import logging

from celery import shared_task

from billing.selectors import unbalanced_transactions, wallet_drifts

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def audit_wallets() -> None:
    """Hourly proof that cached balances equal the ledger; drift is logged as an error."""
    drifts = wallet_drifts()
    for d in drifts:
        logger.error(
            "billing.audit.drift wallet=%s cash_fen=%d ledger_cash_fen=%d promo_fen=%d "
            "ledger_promo_fen=%d",
            d.wallet_id,
            d.cash_fen,
            d.ledger_cash_fen,
            d.promo_fen,
            d.ledger_promo_fen,
        )
    unbalanced = unbalanced_transactions()
    for txn in unbalanced:
        logger.error("billing.audit.unbalanced transaction=%s", txn)
    logger.info("billing.audit wallets_drifting=%d unbalanced=%d", len(drifts), len(unbalanced))
