from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import gettext_noop


class TransactionKind(models.TextChoices):
    TRIAL = "trial", _("Trial credit")
    TOPUP = "topup", _("Top-up")
    BANK_TRANSFER = "bank_transfer", _("Bank transfer")
    USAGE = "usage", _("Usage")
    ADJUSTMENT = "adjustment", _("Adjustment")
    REFUND = "refund", _("Refund")
    REVERSAL = "reversal", _("Reversal")
    # A payment disputed at the card issuer (debit when Stripe withdraws it, credit when a won
    # dispute reinstates it), and what the wallet then owes: into arrears, or paid off.
    CHARGEBACK = "chargeback", _("Chargeback")
    ARREARS = "arrears", _("Arrears")
    # Cash moved between a person's own wallet and a team's (billing.services.transfer_post).
    TRANSFER = "transfer", _("Transfer")


class PriceKind(models.TextChoices):
    """Which price a usage charge was made at: the offering's trial price, paid from trial
    credit, or its standard price, paid from cash."""

    TRIAL = "trial", _("Trial price")
    STANDARD = "standard", _("Standard price")


class Account(models.TextChoices):
    """Ledger accounts. The first three belong to a wallet (arrears: what it owes, as negative
    money); the rest are the platform's books, so every transaction's entries sum to zero
    (double entry)."""

    CASH = "cash", _("Cash")
    PROMO = "promo", _("Trial credit")
    ARREARS = "arrears", _("Arrears (owed by the customer)")
    PROMOTIONS = "platform:promotions", _("Platform: promotions")
    REVENUE = "platform:revenue", _("Platform: revenue")
    PAYMENTS = "platform:payments", _("Platform: payment processor")
    BANK = "platform:bank", _("Platform: bank")
    ADJUSTMENTS = "platform:adjustments", _("Platform: adjustments")
    REFUNDS = "platform:refunds", _("Platform: refunds to customers")
    CHARGEBACKS = "platform:chargebacks", _("Platform: chargebacks")
    TRANSFERS = "platform:transfers", _("Platform: transfers between wallets (nets to zero)")


WALLET_ACCOUNTS = (Account.CASH, Account.PROMO, Account.ARREARS)

# Where the other side of a transaction of each kind is booked.
COUNTER_ACCOUNT = {
    TransactionKind.TRIAL: Account.PROMOTIONS,
    TransactionKind.TOPUP: Account.PAYMENTS,
    TransactionKind.BANK_TRANSFER: Account.BANK,
    TransactionKind.USAGE: Account.REVENUE,
    TransactionKind.ADJUSTMENT: Account.ADJUSTMENTS,
    TransactionKind.REFUND: Account.REFUNDS,
    TransactionKind.CHARGEBACK: Account.CHARGEBACKS,
    TransactionKind.TRANSFER: Account.TRANSFERS,
}

# Credits of these kinds are promotional money: spent first, never refunded or transferred.
PROMO_CREDIT_KINDS = (TransactionKind.TRIAL,)
# Credits of these kinds are money the customer paid in: a wallet that never had one is on trial
# credit only.
PAID_CREDIT_KINDS = (TransactionKind.TOPUP, TransactionKind.BANK_TRANSFER, TransactionKind.TRANSFER)
# Credits of these kinds bring paid cash in from outside, the money a 发票 may be asked for. A
# transfer moves invoiceability only as the portion it carries (invoiceable_delta_fen), never
# by its amount.
PAID_IN_KINDS = (TransactionKind.TOPUP, TransactionKind.BANK_TRANSFER)


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
    CANCELLED = "cancelled", _("Cancelled")
    REVIEW = "review", _("Under review")


class TopUpMethod(models.TextChoices):
    STRIPE = "stripe", _("Online payment")
    BANK_TRANSFER = "bank_transfer", _("Bank transfer")


class PaidWith(models.TextChoices):
    """The Stripe payment method type an online top-up was paid with."""

    CARD = "card", _("Card")
    ALIPAY = "alipay", _("Alipay")
    WECHAT_PAY = "wechat_pay", _("WeChat Pay")


# The ledger line of a top-up paid with each method (msgids, translated where shown).
TOPUP_DESCRIPTIONS: dict[str, str] = {
    PaidWith.CARD: gettext_noop("Top-up (card)"),
    PaidWith.ALIPAY: gettext_noop("Top-up (Alipay)"),
    PaidWith.WECHAT_PAY: gettext_noop("Top-up (WeChat Pay)"),
}


class RefundSource(models.TextChoices):
    OPERATOR = "operator", _("Refunded by an operator here")
    DASHBOARD = "dashboard", _("Refunded in the Stripe dashboard")


class DisputeStatus(models.TextChoices):
    """Stripe's dispute statuses. `warning_*` are inquiries: no money is withdrawn."""

    WARNING_NEEDS_RESPONSE = "warning_needs_response", _("Inquiry: needs response")
    WARNING_UNDER_REVIEW = "warning_under_review", _("Inquiry: under review")
    WARNING_CLOSED = "warning_closed", _("Inquiry: closed")
    NEEDS_RESPONSE = "needs_response", _("Needs response")
    UNDER_REVIEW = "under_review", _("Under review")
    WON = "won", _("Won")
    LOST = "lost", _("Lost")
    PREVENTED = "prevented", _("Prevented")


DISPUTE_CLOSED = (
    DisputeStatus.WARNING_CLOSED,
    DisputeStatus.WON,
    DisputeStatus.LOST,
    DisputeStatus.PREVENTED,
)
# Statuses in which Stripe has not taken the disputed money (inquiries, and disputes prevented
# before they were filed).
DISPUTE_NO_WITHDRAWAL = (
    DisputeStatus.WARNING_NEEDS_RESPONSE,
    DisputeStatus.WARNING_UNDER_REVIEW,
    DisputeStatus.WARNING_CLOSED,
    DisputeStatus.PREVENTED,
)


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


class InvoiceKind(models.TextChoices):
    """普通发票 (general VAT invoice) or 专用发票 (special VAT invoice, which lets a company
    deduct input tax and so needs its full registration details)."""

    GENERAL = "general", _("General VAT invoice (普通发票)")
    SPECIAL = "special", _("Special VAT invoice (专用发票)")


class InvoiceStatus(models.TextChoices):
    REQUESTED = "requested", _("Requested")
    ISSUED = "issued", _("Issued")
    REJECTED = "rejected", _("Rejected")


# An invoice request is decided once: issued or rejected, never back.
INVOICE_TRANSITIONS = {
    InvoiceStatus.REQUESTED: (InvoiceStatus.ISSUED, InvoiceStatus.REJECTED),
    InvoiceStatus.ISSUED: (),
    InvoiceStatus.REJECTED: (),
}
# Requests that hold part of the invoiceable amount.
INVOICE_HOLDING = (InvoiceStatus.REQUESTED, InvoiceStatus.ISSUED)
