from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from billing.choices import (
    DISPUTE_CLOSED,
    WALLET_ACCOUNTS,
    Account,
    ApprovalStatus,
    InvoiceKind,
    InvoiceStatus,
    PaidWith,
    PriceKind,
    RefundSource,
    RefundStatus,
    RunwayLevel,
    TopUpMethod,
    TopUpStatus,
    TransactionKind,
)
from starverse.core.ids import PublicIdField
from starverse.core.money import format_fen


class Wallet(models.Model):
    """A tenant's prepaid CNY balance. The balances are a cache of the ledger: they change only
    inside billing.services, under a row lock, and never go below zero. `arrears_fen` is what
    the tenant owes after a chargeback or a refund took more cash than it held; it exists only
    while no cash is free, because every cash credit pays it off first.

    `pending_cash_fen` and `pending_promo_fen` are the usage minutes accrued since their
    holdings' last hourly posting (compute.metering): spent, held against the balance, not yet
    in the ledger. Every decision (a debit, a runway, a hold) sees only what is free of them;
    the balance columns still equal the ledger's sums."""

    id = PublicIdField(prefix="wal")
    tenant = models.OneToOneField(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="wallet"
    )
    cash_fen = models.BigIntegerField(default=0)
    promo_fen = models.BigIntegerField(default=0)
    arrears_fen = models.BigIntegerField(default=0, db_default=0)
    pending_cash_fen = models.BigIntegerField(
        default=0, db_default=0, help_text="Usage accrued from cash, not yet posted."
    )
    pending_promo_fen = models.BigIntegerField(
        default=0, db_default=0, help_text="Usage accrued from trial credit, not yet posted."
    )
    postings = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="How many transactions its ledger has: the last one's number (seq).",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        permissions = [
            ("post_adjustment", "Can post operator adjustments"),
            ("post_bank_transfer", "Can post bank transfers"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(cash_fen__gte=0), name="wallet_cash_non_negative"),
            models.CheckConstraint(condition=Q(promo_fen__gte=0), name="wallet_promo_non_negative"),
            models.CheckConstraint(
                condition=Q(arrears_fen__gte=0), name="wallet_arrears_non_negative"
            ),
            models.CheckConstraint(
                condition=Q(arrears_fen=0) | Q(cash_fen=models.F("pending_cash_fen")),
                name="wallet_arrears_only_without_free_cash",
            ),
            models.CheckConstraint(
                condition=Q(pending_cash_fen__gte=0, pending_cash_fen__lte=models.F("cash_fen")),
                name="wallet_pending_cash_within_cash",
            ),
            models.CheckConstraint(
                condition=Q(pending_promo_fen__gte=0, pending_promo_fen__lte=models.F("promo_fen")),
                name="wallet_pending_promo_within_promo",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.tenant_id})"

    @property
    def cash_free_fen(self) -> int:
        """Cash not held by accrued usage: what a debit, a refund or a transfer may take."""
        return self.cash_fen - self.pending_cash_fen

    @property
    def promo_free_fen(self) -> int:
        """Trial credit not held by accrued usage."""
        return self.promo_fen - self.pending_promo_fen

    @property
    def pending_fen(self) -> int:
        return self.pending_cash_fen + self.pending_promo_fen

    def balance_shown(self) -> dict[str, int]:
        """The balance as the API and the console give it: free of accrued usage, which
        `pending_fen` says (it is posted by the hour and at every stop)."""
        return {
            "cash_fen": self.cash_free_fen,
            "promo_fen": self.promo_free_fen,
            "pending_fen": self.pending_fen,
            "total_fen": self.total_fen,
        }

    @property
    def total_fen(self) -> int:
        """The balance people see: net of arrears and of the usage accrued since the last
        hourly posting (so it falls minute by minute, as the meter runs); negative while the
        tenant owes money."""
        return self.cash_free_fen + self.promo_free_fen - self.arrears_fen


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
    amount_fen = models.BigIntegerField(
        help_text="Change of the wallet's total balance (cash + trial credit − arrears)."
    )
    cash_delta_fen = models.BigIntegerField()
    promo_delta_fen = models.BigIntegerField()
    arrears_delta_fen = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="Change of what the wallet owes (positive: into arrears).",
    )
    cash_after_fen = models.BigIntegerField()
    promo_after_fen = models.BigIntegerField()
    arrears_after_fen = models.BigIntegerField(default=0, db_default=0)
    invoiceable_delta_fen = models.BigIntegerField(
        default=0,
        db_default=0,
        help_text="A transfer's change of what the wallet may invoice: the part of its amount "
        "that was paid cash not yet invoiced at the source (billing.services.transfer_post), "
        "negative on the way out. 0 for every other kind.",
    )
    description = models.CharField(max_length=500)
    price_kind = models.CharField(
        max_length=16,
        choices=PriceKind.choices,
        blank=True,
        default="",
        db_default="",
        help_text="Usage: whether it was charged at the offering's trial price (from trial "
        "credit) or its standard price (from cash); blank for other kinds.",
    )
    reason = models.TextField(blank=True, help_text="Why an operator posted it.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reverses = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="reversed_by"
    )
    instance_id = models.CharField(max_length=32, blank=True, db_index=True)
    minutes = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Usage: the minutes of GPU time this posting pays (an hourly posting of the "
        "meter, or the rest of a session at its stop). 0 for other kinds, and for per-minute "
        "postings made before hourly postings, each of which paid one minute.",
    )
    # Its place in its wallet's ledger, 1, 2, 3 … in the order the postings were made (under
    # the wallet's lock, so the order of the balances after): statements, exports and lists
    # read the ledger in this order. Postings of one moment share a created_at (the meter posts
    # a tick's hours at once), so time alone cannot order them.
    seq = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        permissions = [("reverse_transaction", "Can reverse ledger transactions")]
        indexes = [models.Index(fields=["wallet", "-created_at"], name="ledger_wallet_recent")]
        constraints = [
            models.UniqueConstraint(fields=["wallet", "seq"], name="ledger_wallet_seq"),
            models.CheckConstraint(
                condition=Q(
                    amount_fen=models.F("cash_delta_fen")
                    + models.F("promo_delta_fen")
                    - models.F("arrears_delta_fen")
                ),
                name="ledger_amount_is_sum_of_deltas",
            ),
            models.CheckConstraint(
                condition=Q(cash_after_fen__gte=0)
                & Q(promo_after_fen__gte=0)
                & Q(arrears_after_fen__gte=0),
                name="ledger_after_non_negative",
            ),
            # only a transfer carries invoiceability, and never more than the cash it moves
            models.CheckConstraint(
                condition=Q(invoiceable_delta_fen=0)
                | Q(
                    kind=TransactionKind.TRANSFER,
                    invoiceable_delta_fen__gt=0,
                    invoiceable_delta_fen__lte=models.F("cash_delta_fen"),
                )
                | Q(
                    kind=TransactionKind.TRANSFER,
                    invoiceable_delta_fen__lt=0,
                    invoiceable_delta_fen__gte=models.F("cash_delta_fen"),
                ),
                name="ledger_invoiceable_only_within_a_transfer",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.kind} {self.amount_fen}"

    @property
    def balance_after_fen(self) -> int:
        return self.cash_after_fen + self.promo_after_fen - self.arrears_after_fen


class LedgerEntry(models.Model):
    """One leg of a transaction. The legs of a transaction sum to zero: the wallet's cash, promo
    and arrears legs (an arrears leg is the change of what it owes, negated) against one
    platform account."""

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


class TopUp(models.Model):
    """A request to add cash to a wallet: a Stripe Checkout Session, or a bank transfer posted by
    an operator. It is credited at most once, by the ledger key of its Checkout Session (online)
    or of its bank reference (transfer), whichever path reports the payment first."""

    id = PublicIdField(prefix="top")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="topups")
    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="topups")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    method = models.CharField(
        max_length=16, choices=TopUpMethod.choices, default=TopUpMethod.STRIPE
    )
    amount_fen = models.BigIntegerField()
    currency = models.CharField(max_length=3, default="cny")
    status = models.CharField(
        max_length=16, choices=TopUpStatus.choices, default=TopUpStatus.CREATED
    )
    paid_with = models.CharField(
        max_length=32,
        choices=PaidWith.choices,
        blank=True,
        help_text="The Stripe payment method type it was paid with, once paid.",
    )
    checkout_session_id = models.CharField(max_length=255, null=True, blank=True, unique=True)
    checkout_url = models.URLField(max_length=2000, blank=True)
    payment_intent_id = models.CharField(max_length=255, blank=True, db_index=True)
    charge_id = models.CharField(
        max_length=255,
        blank=True,
        db_index=True,
        help_text="Stripe's charge, once a dispute or refund named it.",
    )
    bank_reference = models.CharField(max_length=100, null=True, blank=True, unique=True)
    payer = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    review_reason = models.TextField(blank=True)
    error_message = models.TextField(blank=True)
    ledger_transaction = models.OneToOneField(
        LedgerTransaction, null=True, blank=True, on_delete=models.PROTECT, related_name="topup"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("refund_topup", "Can refund top-ups")]
        constraints = [models.CheckConstraint(condition=Q(amount_fen__gt=0), name="topup_positive")]

    def __str__(self) -> str:
        return f"{self.id} {format_fen(self.amount_fen)} {self.get_status_display()}"

    def method_display(self) -> str:
        """How it was paid as people say it: "Alipay", "Card" … once Stripe said, else the
        method ("Online payment", "Bank transfer")."""
        return self.get_paid_with_display() if self.paid_with else self.get_method_display()


class StripeEvent(models.Model):
    """A webhook event as Stripe sent it, stored once (its id is the primary key) and processed
    after commit by a task; `processed_at` is set only when processing finished."""

    id = models.CharField(max_length=255, primary_key=True)
    type = models.CharField(max_length=100)
    livemode = models.BooleanField(default=False)
    payload = models.JSONField()
    received_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"


class Refund(models.Model):
    """Cash of a top-up returned through Stripe. An operator's refund here reserves (debits) the
    amount when it is asked for, keeps it when Stripe reports success and releases it when it
    fails. A refund made in the Stripe dashboard (`source` dashboard, no operator) is recorded
    and debited once when Stripe reports it succeeded, into arrears if cash is short."""

    id = PublicIdField(prefix="rfd")
    topup = models.ForeignKey(TopUp, on_delete=models.PROTECT, related_name="refunds")
    amount_fen = models.BigIntegerField()
    status = models.CharField(
        max_length=16, choices=RefundStatus.choices, default=RefundStatus.PENDING
    )
    source = models.CharField(
        max_length=16, choices=RefundSource.choices, default=RefundSource.OPERATOR
    )
    stripe_refund_id = models.CharField(max_length=255, null=True, blank=True, unique=True)
    reason = models.TextField()
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reserve_transaction = models.OneToOneField(
        LedgerTransaction, on_delete=models.PROTECT, related_name="refund_reserved"
    )
    arrears_transaction = models.OneToOneField(
        LedgerTransaction,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="A dashboard refund's posting into arrears, where cash did not cover it.",
    )
    release_transaction = models.OneToOneField(
        LedgerTransaction,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="refund_released",
    )
    error_message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_fen__gt=0), name="refund_positive"),
            models.CheckConstraint(
                condition=Q(source=RefundSource.DASHBOARD) | Q(requested_by__isnull=False),
                name="refund_operator_named",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {format_fen(self.amount_fen)} {self.get_status_display()}"


class Dispute(models.Model):
    """A chargeback (or an inquiry) a card holder opened at their bank against a top-up's
    payment, as Stripe reports it. The disputed amount is debited once when Stripe withdraws
    it (`debit_transaction`, with `arrears_transaction` for what cash could not cover) and
    credited back once if the dispute is won (`credit_transaction`)."""

    id = PublicIdField(prefix="dsp")
    stripe_dispute_id = models.CharField(max_length=255, unique=True)
    topup = models.ForeignKey(TopUp, on_delete=models.PROTECT, related_name="disputes")
    amount_fen = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=32, help_text="Stripe's dispute status.")
    reason = models.CharField(max_length=64, blank=True, help_text="Stripe's dispute reason.")
    debit_transaction = models.OneToOneField(
        LedgerTransaction, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    arrears_transaction = models.OneToOneField(
        LedgerTransaction, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    credit_transaction = models.OneToOneField(
        LedgerTransaction, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    last_event_id = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_fen__gt=0), name="dispute_positive"),
            models.CheckConstraint(
                condition=Q(credit_transaction__isnull=True) | Q(debit_transaction__isnull=False),
                name="dispute_credit_after_debit",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {format_fen(self.amount_fen)} {self.status}"

    @property
    def is_open(self) -> bool:
        return self.status not in DISPUTE_CLOSED


class AccountHold(models.Model):
    """A stop on a tenant's new orders (instances, starts, storage) after a disputed payment or
    a refund that left the wallet in arrears; top-ups stay allowed. One row per cause (`key`,
    e.g. `dispute:dp_…`); the tenant is on hold while any row is not lifted. Only an operator
    lifts a hold, with a reason, and the row keeps who and when."""

    id = PublicIdField(prefix="hld")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="holds")
    key = models.CharField(max_length=255, unique=True)
    reason = models.TextField()
    dispute = models.ForeignKey(
        Dispute, null=True, blank=True, on_delete=models.PROTECT, related_name="holds"
    )
    refund = models.ForeignKey(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="holds"
    )
    created_at = models.DateTimeField(default=timezone.now)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    lift_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("lift_hold", "Can lift account holds")]
        indexes = [
            models.Index(
                fields=["tenant"], condition=Q(lifted_at__isnull=True), name="hold_open_by_tenant"
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(lifted_at__isnull=True)
                | (Q(lifted_by__isnull=False) & ~Q(lift_reason="")),
                name="hold_lift_audited",
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.tenant_id} {'lifted' if self.lifted_at else 'open'}"


class AdjustmentRequest(models.Model):
    """An operator posting above the approval threshold — an adjustment, a bank transfer or a
    reversal (`kind`) — waiting for a second operator. `payload` holds what the kind needs
    besides the amount: the payer and bank reference, or the transaction to reverse."""

    class Kind(models.TextChoices):
        ADJUSTMENT = "adjustment", "Adjustment"
        BANK_TRANSFER = "bank_transfer", "Bank transfer"
        REVERSAL = "reversal", "Reversal"

    id = PublicIdField(prefix="adr")
    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="adjustment_requests")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.ADJUSTMENT)
    payload = models.JSONField(default=dict, blank=True)
    amount_fen = models.BigIntegerField()
    reason = models.TextField()
    status = models.CharField(
        max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    ledger_transaction = models.OneToOneField(
        LedgerTransaction, null=True, blank=True, on_delete=models.PROTECT, related_name="approval"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(decided_by__isnull=True) | ~Q(decided_by=models.F("requested_by")),
                name="adjustment_four_eyes",
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} {format_fen(self.amount_fen)} {self.get_status_display()}"


class RunwayNotice(models.Model):
    """The lowest runway level a wallet has been told about, so each crossing mails once."""

    wallet = models.OneToOneField(
        Wallet, on_delete=models.CASCADE, primary_key=True, related_name="runway_notice"
    )
    level = models.PositiveSmallIntegerField(choices=RunwayLevel.choices, default=RunwayLevel.OK)
    notified_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.wallet_id} level {self.level}"


class InvoiceProfile(models.Model):
    """A tenant's invoice details (one per tenant), copied into each invoice request as it is
    made: editing the profile later never changes a request. A special invoice (专用发票) needs
    the address, phone, bank and account; every tax number passes the GB 32100-2015 check."""

    id = PublicIdField(prefix="ivp")
    tenant = models.OneToOneField(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="invoice_profile"
    )
    kind = models.CharField(max_length=16, choices=InvoiceKind.choices, default=InvoiceKind.GENERAL)
    title = models.CharField(max_length=200, help_text="发票抬头: the buyer's name.")
    tax_number = models.CharField(
        max_length=18, blank=True, help_text="统一社会信用代码 (18 characters)."
    )
    address = models.CharField(max_length=300, blank=True)
    phone = models.CharField(max_length=40, blank=True)
    bank = models.CharField(max_length=200, blank=True)
    bank_account = models.CharField(max_length=64, blank=True)
    email = models.EmailField(help_text="Where the issued invoice is sent.")
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.title} ({self.tenant_id})"


class InvoiceRequest(models.Model):
    """A request for one 发票 over an amount of paid cash. Requested and issued requests hold
    their amount: together they never exceed what the tenant paid in minus what was refunded
    or charged back (billing.invoices.invoiceable_fen, checked under the wallet's lock). An
    operator issues it (a PDF, a number or both) or rejects it with a reason, once."""

    id = PublicIdField(prefix="inv")
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="invoice_requests"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    amount_fen = models.BigIntegerField()
    profile = models.JSONField(help_text="The invoice profile as it was when requested.")
    status = models.CharField(
        max_length=16, choices=InvoiceStatus.choices, default=InvoiceStatus.REQUESTED
    )
    number = models.CharField(max_length=64, blank=True, help_text="发票号码, once issued.")
    pdf = models.FileField(upload_to="invoices/%Y/%m/", blank=True)
    note = models.TextField(blank=True, help_text="The operator's note; a rejection's reason.")
    idempotency_key = models.CharField(max_length=200, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    issued_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("issue_invoice", "Can issue or reject invoice requests")]
        constraints = [
            models.CheckConstraint(condition=Q(amount_fen__gt=0), name="invoice_positive"),
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="invoice_idempotency_key",
            ),
            models.CheckConstraint(
                condition=~Q(status=InvoiceStatus.ISSUED) | ~Q(number="") | ~Q(pdf=""),
                name="invoice_issued_has_number_or_pdf",
            ),
            models.CheckConstraint(
                condition=~Q(status=InvoiceStatus.REJECTED) | ~Q(note=""),
                name="invoice_rejected_has_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {format_fen(self.amount_fen)} {self.get_status_display()}"


class Statement(models.Model):
    """A tenant's monthly statement (对账单) for one closed calendar month (in TIME_ZONE): the
    opening and closing balances from the ledger, every ledger line of the month and usage by
    instance and volume, as a PDF and a CSV. Made once per (tenant, month)."""

    id = PublicIdField(prefix="stm")
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="statements"
    )
    month = models.DateField(help_text="The first day of the month.")
    opening_fen = models.BigIntegerField(help_text="Cash + trial credit − arrears at the start.")
    closing_fen = models.BigIntegerField(help_text="Cash + trial credit − arrears at the end.")
    opening_cash_fen = models.BigIntegerField(default=0)
    opening_promo_fen = models.BigIntegerField(default=0)
    closing_cash_fen = models.BigIntegerField(default=0)
    closing_promo_fen = models.BigIntegerField(default=0)
    credits_fen = models.BigIntegerField(default=0)
    debits_fen = models.BigIntegerField(default=0)
    lines = models.PositiveIntegerField(default=0)
    pdf = models.FileField(upload_to="statements/%Y/%m/")
    csv = models.FileField(upload_to="statements/%Y/%m/")
    generated_at = models.DateTimeField(default=timezone.now)

    # The current month so far (billing.statements.month_to_date) is a row that is never
    # saved, cut at `as_of`.
    as_of: datetime | None = None

    class Meta:
        ordering = ["-month"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "month"], name="statement_once_per_month"),
            models.CheckConstraint(
                condition=Q(
                    closing_fen=models.F("opening_fen")
                    + models.F("credits_fen")
                    + models.F("debits_fen")
                ),
                name="statement_balances_add_up",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.month:%Y-%m}"

    @property
    def final(self) -> bool:
        return self.as_of is None
