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
    REFUNDS = "platform:refunds", _("Platform: refunds to customers")


WALLET_ACCOUNTS = (Account.CASH, Account.PROMO)

# Where the other side of a transaction of each kind is booked.
COUNTER_ACCOUNT = {
    TransactionKind.TRIAL: Account.PROMOTIONS,
    TransactionKind.TOPUP: Account.PAYMENTS,
    TransactionKind.BANK_TRANSFER: Account.BANK,
    TransactionKind.USAGE: Account.REVENUE,
    TransactionKind.ADJUSTMENT: Account.ADJUSTMENTS,
    TransactionKind.REFUND: Account.REFUNDS,
}

# Credits of these kinds are promotional money: spent first, never refunded or transferred.
PROMO_CREDIT_KINDS = (TransactionKind.TRIAL,)


class TrialStatus(models.TextChoices):
    """Where an account stands with the trial credit (billing.selectors.trial_state)."""

    GRANTED = "granted", _("Granted")
    PENDING_VERIFICATION = "pending_verification", _("Waiting for e-mail verification")
    NOT_ELIGIBLE = "not_eligible", _("Not eligible")


class TopUpStatus(models.TextChoices):
    CREATED = "created", _("Created")
    PENDING = "pending", _("Awaiting payment")
    PROCESSING = "processing", _("Payment processing")
    PAID = "paid", _("Paid")
    FAILED = "failed", _("Failed")
    EXPIRED = "expired", _("Expired")
    REVIEW = "review", _("Under review")


class TopUpMethod(models.TextChoices):
    STRIPE = "stripe", _("Online payment")
    BANK_TRANSFER = "bank_transfer", _("Bank transfer")


class RefundStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    SUCCEEDED = "succeeded", _("Refunded")
    FAILED = "failed", _("Failed")


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", _("Awaiting approval")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")


class RunwayLevel(models.IntegerChoices):
    """How low a wallet's runway is; notices are sent when the level goes down, once."""

    OK = 0, _("More than an hour")
    BELOW_HOUR = 1, _("Less than an hour")
    BELOW_TEN_MINUTES = 2, _("Less than ten minutes")
