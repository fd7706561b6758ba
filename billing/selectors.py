from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q, QuerySet, Sum

from billing.choices import PAID_CREDIT_KINDS, Account, TransactionKind, TrialStatus
from billing.models import LedgerEntry, LedgerTransaction, Wallet
from starverse.accounts.models import User
from starverse.core.db import first_row


def wallet_for_tenant(tenant_id: str) -> Wallet:
    return Wallet.objects.get(tenant_id=tenant_id)


def wallet_locked(tenant_id: str) -> Wallet:
    """The tenant's wallet, its row locked until the transaction ends. The ledger posts under
    this lock, so a decision that must hold against the balance until it commits (placing a
    queued order, counting an account's orders against its limits) reads the wallet so. In the
    lock order it comes last: after an instance, its GPU model and its disks."""
    # one plain SELECT … FOR UPDATE: every order reads it, and the ORM's query building cost
    # more than the query
    wallet = first_row(Wallet, "tenant_id = %s", [tenant_id], lock=True)
    if wallet is None:
        raise Wallet.DoesNotExist("Wallet matching query does not exist.")
    return wallet


def wallet_has_paid(wallet: Wallet) -> bool:
    """Whether the wallet holds cash (trial credit is promo money, so cash came from the
    customer or an operator) or ever received a payment (a top-up or a bank transfer). An
    account whose wallet has neither lives on trial credit."""
    return (
        wallet.cash_fen > 0
        or LedgerTransaction.objects.filter(
            wallet=wallet, kind__in=PAID_CREDIT_KINDS, cash_delta_fen__gt=0
        ).exists()
    )


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
            wallet__tenant_id=user.personal_tenant_id, kind=TransactionKind.TRIAL
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
    arrears_fen: int = 0
    ledger_arrears_fen: int = 0


def wallet_drifts() -> list[Drift]:
    """Wallets whose cached balances differ from the sum of their ledger entries (arrears
    entries are negative money: the wallet owes minus their sum)."""
    sums = {
        row["wallet_id"]: row
        for row in LedgerEntry.objects.filter(wallet__isnull=False)
        .values("wallet_id")
        .annotate(
            cash=Sum("amount_fen", filter=Q(account=Account.CASH), default=0),
            promo=Sum("amount_fen", filter=Q(account=Account.PROMO), default=0),
            arrears=Sum("amount_fen", filter=Q(account=Account.ARREARS), default=0),
        )
    }
    drifts = []
    for wallet in Wallet.objects.order_by("id").iterator():
        row = sums.get(wallet.id, {"cash": 0, "promo": 0, "arrears": 0})
        cached = (wallet.cash_fen, wallet.promo_fen, wallet.arrears_fen)
        ledger = (row["cash"], row["promo"], -row["arrears"])
        if cached != ledger:
            drifts.append(Drift(wallet.id, *cached[:2], *ledger[:2], cached[2], ledger[2]))
    return drifts


def unbalanced_transactions() -> list[str]:
    """Transactions whose entries do not sum to zero (double entry broken)."""
    return list(
        LedgerEntry.objects.values("transaction_id")
        .annotate(total=Sum("amount_fen"))
        .exclude(total=0)
        .values_list("transaction_id", flat=True)
    )
