from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from billing.choices import WALLET_ACCOUNTS, Account, TransactionKind
from starverse.core.ids import PublicIdField


class Wallet(models.Model):
    """A tenant's prepaid CNY balance. The two balances are a cache of the ledger: they change
    only inside billing.services.ledger_post, under a row lock, and never go below zero."""

    id = PublicIdField(prefix="wal")
    tenant = models.OneToOneField(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="wallet"
    )
    cash_fen = models.BigIntegerField(default=0)
    promo_fen = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(cash_fen__gte=0), name="wallet_cash_non_negative"),
            models.CheckConstraint(condition=Q(promo_fen__gte=0), name="wallet_promo_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.tenant_id})"

    @property
    def total_fen(self) -> int:
        return self.cash_fen + self.promo_fen


class LedgerTransaction(models.Model):
    """One immutable change of one wallet's balance. The idempotency key is unique: posting the
    same key again returns this row (same request) or is a conflict (different request).
    Rows are never updated or deleted (database triggers refuse it); a mistake is corrected by a
    reversing transaction, and a transaction can be reversed at most once."""

    id = PublicIdField(prefix="txn")
    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="transactions")
    kind = models.CharField(max_length=32, choices=TransactionKind.choices)
    idempotency_key = models.CharField(max_length=200, unique=True)
    request_hash = models.CharField(max_length=64)
    amount_fen = models.BigIntegerField(help_text="Change of the wallet's total balance.")
    cash_delta_fen = models.BigIntegerField()
    promo_delta_fen = models.BigIntegerField()
    cash_after_fen = models.BigIntegerField()
    promo_after_fen = models.BigIntegerField()
    description = models.CharField(max_length=500)
    reason = models.TextField(blank=True, help_text="Why an operator posted it.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reverses = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="reversed_by"
    )
    instance_id = models.CharField(max_length=32, blank=True, db_index=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        indexes = [models.Index(fields=["wallet", "-created_at"], name="ledger_wallet_recent")]
        constraints = [
            models.CheckConstraint(
                condition=Q(amount_fen=models.F("cash_delta_fen") + models.F("promo_delta_fen")),
                name="ledger_amount_is_sum_of_deltas",
            ),
            models.CheckConstraint(
                condition=Q(cash_after_fen__gte=0) & Q(promo_after_fen__gte=0),
                name="ledger_after_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.kind} {self.amount_fen}"


class LedgerEntry(models.Model):
    """One leg of a transaction. The legs of a transaction sum to zero: the wallet's cash and
    promo legs against one platform account."""

    transaction = models.ForeignKey(
        LedgerTransaction, on_delete=models.PROTECT, related_name="entries"
    )
    wallet = models.ForeignKey(Wallet, null=True, on_delete=models.PROTECT, related_name="+")
    account = models.CharField(max_length=32, choices=Account.choices)
    amount_fen = models.BigIntegerField()

    class Meta:
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["wallet", "account"], name="ledger_entry_wallet_account")]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(account__in=[a.value for a in WALLET_ACCOUNTS], wallet__isnull=False)
                    | (~Q(account__in=[a.value for a in WALLET_ACCOUNTS]) & Q(wallet__isnull=True))
                ),
                name="ledger_entry_wallet_iff_wallet_account",
            )
        ]

    def __str__(self) -> str:
        return f"{self.account} {self.amount_fen}"
