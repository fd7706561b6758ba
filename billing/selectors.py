from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q, QuerySet, Sum

from billing.choices import Account, TransactionKind, TrialStatus
from billing.models import LedgerEntry, LedgerTransaction, Wallet
from starverse.accounts.models import User


def wallet_for_tenant(tenant_id: str) -> Wallet:
    return Wallet.objects.get(tenant_id=tenant_id)


def ledger_for_tenant(tenant_id: str) -> QuerySet[LedgerTransaction]:
    return LedgerTransaction.objects.filter(wallet__tenant_id=tenant_id).order_by(
        "-created_at", "-id"
    )


@dataclass(frozen=True)
class TrialState:
    status: TrialStatus
    amount_fen: int  # granted: what was credited; pending: what verifying would credit; else 0


def trial_state(user: User) -> TrialState:
    """The account's trial: granted (a trial credit is on its wallet's ledger), pending until
    its address is verified, or not eligible (its canonical address's trial went to another
    account, it is an operator's, or the deployment grants at sign-up and gave none)."""
    grant = (
        LedgerTransaction.objects.filter(
            wallet__tenant_id=user.tenant_id, kind=TransactionKind.TRIAL
        )
        .order_by("created_at")
        .first()
    )
    if grant is not None:
        return TrialState(TrialStatus.GRANTED, grant.amount_fen)
    if (
        settings.TRIAL_REQUIRES_VERIFICATION
        and user.email_verified_at is None
        and not user.is_staff
    ):
        return TrialState(TrialStatus.PENDING_VERIFICATION, settings.TRIAL_CREDIT_FEN)
    return TrialState(TrialStatus.NOT_ELIGIBLE, 0)


def trial_given_to_another(*, canonical_email: str, wallet_id: str) -> bool:
    """Whether an account of this canonical address other than the wallet's holds a trial.
    Grants made before the key was the canonical address (`trial:{user}`) are found only this
    way; no such key is written any more, so this read does not race the grants it looks for."""
    return (
        LedgerTransaction.objects.filter(
            kind=TransactionKind.TRIAL,
            wallet__tenant__members__canonical_email=canonical_email,
        )
        .exclude(wallet_id=wallet_id)
        .exists()
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
