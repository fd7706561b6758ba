from dataclasses import dataclass

from django.db.models import Q, QuerySet, Sum

from billing.choices import Account
from billing.models import LedgerEntry, LedgerTransaction, Wallet


def wallet_for_tenant(tenant_id: str) -> Wallet:
    return Wallet.objects.get(tenant_id=tenant_id)


def ledger_for_tenant(tenant_id: str) -> QuerySet[LedgerTransaction]:
    return LedgerTransaction.objects.filter(wallet__tenant_id=tenant_id).order_by(
        "-created_at", "-id"
    )


@dataclass(frozen=True)
class Drift:
    wallet_id: str
    cash_fen: int
    promo_fen: int
    ledger_cash_fen: int
    ledger_promo_fen: int


def wallet_drifts() -> list[Drift]:
    """Wallets whose cached balances differ from the sum of their ledger entries."""
    sums = {
        row["wallet_id"]: row
        for row in LedgerEntry.objects.filter(wallet__isnull=False)
        .values("wallet_id")
        .annotate(
            cash=Sum("amount_fen", filter=Q(account=Account.CASH), default=0),
            promo=Sum("amount_fen", filter=Q(account=Account.PROMO), default=0),
        )
    }
    drifts = []
    for wallet in Wallet.objects.order_by("id").iterator():
        row = sums.get(wallet.id, {"cash": 0, "promo": 0})
        if (wallet.cash_fen, wallet.promo_fen) != (row["cash"], row["promo"]):
            drifts.append(
                Drift(wallet.id, wallet.cash_fen, wallet.promo_fen, row["cash"], row["promo"])
            )
    return drifts


def unbalanced_transactions() -> list[str]:
    """Transactions whose entries do not sum to zero (double entry broken)."""
    return list(
        LedgerEntry.objects.values("transaction_id")
        .annotate(total=Sum("amount_fen"))
        .exclude(total=0)
        .values_list("transaction_id", flat=True)
    )
