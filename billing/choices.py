from django.db import models
from django.utils.translation import gettext_lazy as _


class TransactionKind(models.TextChoices):
    TRIAL = "trial", _("Trial credit")
    TOPUP = "topup", _("Top-up")
    BANK_TRANSFER = "bank_transfer", _("Bank transfer")
    USAGE = "usage", _("Usage")
    ADJUSTMENT = "adjustment", _("Adjustment")
    REFUND = "refund", _("Refund")
    REVERSAL = "reversal", _("Reversal")


class Account(models.TextChoices):
    """Ledger accounts. The first two belong to a wallet; the rest are the platform's books,
    so every transaction's entries sum to zero (double entry)."""

    CASH = "cash", _("Cash")
    PROMO = "promo", _("Trial credit")
    PROMOTIONS = "platform:promotions", _("Platform: promotions")
    REVENUE = "platform:revenue", _("Platform: revenue")
    PAYMENTS = "platform:payments", _("Platform: payment processor")
    BANK = "platform:bank", _("Platform: bank")
    ADJUSTMENTS = "platform:adjustments", _("Platform: adjustments")


WALLET_ACCOUNTS = (Account.CASH, Account.PROMO)

# Where the other side of a transaction of each kind is booked.
COUNTER_ACCOUNT = {
    TransactionKind.TRIAL: Account.PROMOTIONS,
    TransactionKind.TOPUP: Account.PAYMENTS,
    TransactionKind.BANK_TRANSFER: Account.BANK,
    TransactionKind.USAGE: Account.REVENUE,
    TransactionKind.ADJUSTMENT: Account.ADJUSTMENTS,
    TransactionKind.REFUND: Account.PAYMENTS,
}

# Credits of these kinds are promotional money: spent first, never refunded or transferred.
PROMO_CREDIT_KINDS = (TransactionKind.TRIAL,)
