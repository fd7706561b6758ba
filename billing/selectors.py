from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from django.conf import settings
from django.db import connection
from django.db.models import Case, F, Q, Sum, When
from django.db.models.functions import Left, Length

from billing.choices import (
    INVOICE_HOLDING,
    PAID_CREDIT_KINDS,
    PAID_IN_KINDS,
    Account,
    RefundStatus,
    TransactionKind,
    TrialStatus,
)
from billing.models import (
    Dispute,
    InvoiceRequest,
    LedgerEntry,
    LedgerTransaction,
    Refund,
    Wallet,
)
from starverse.accounts.models import User
from starverse.core.db import first_row


def wallet_for_tenant(tenant_id: str) -> Wallet:
    return Wallet.objects.get(tenant_id=tenant_id)


def wallet_locked(tenant_id: str | None = None, *, wallet_id: str | None = None) -> Wallet:
    """The tenant's wallet (or the wallet `wallet_id`), its row locked until the transaction
    ends: the one way a wallet is locked (wallets_locked for several at once; the lock order
    is starverse.core.locks'). The ledger posts under this lock, so a decision that must hold
    against the balance until it commits (placing a queued order, counting an account's orders
    against its limits) reads the wallet so. In the lock order it comes last: after an
    instance, its GPU model and its disks."""
    if (tenant_id is None) == (wallet_id is None):
        raise TypeError("wallet_locked takes a tenant_id or a wallet_id")
    where, value = ("tenant_id = %s", tenant_id) if tenant_id else ("id = %s", wallet_id)
    # one plain SELECT … FOR UPDATE: every order and every posting reads it, and the ORM's
    # query building cost more than the query
    wallet = first_row(Wallet, where, [value], lock=True)
    if wallet is None:
        raise Wallet.DoesNotExist("Wallet matching query does not exist.")
    return wallet


@dataclass
class WalletBalance:
    """A locked wallet's balances as a batch reads and changes them in memory (the meter's
    accruals and postings write them back in one statement)."""

    id: str
    cash_fen: int
    promo_fen: int
    arrears_fen: int
    pending_cash_fen: int
    pending_promo_fen: int
    postings: int


def wallets_locked(wallet_ids: list[str]) -> dict[str, WalletBalance]:
    """Wallet id → balances of the wallets, locked in id order (the documented order: a batch
    never holds one wallet while waiting for a lower one)."""
    rows = (
        Wallet.objects.select_for_update()
        .filter(pk__in=wallet_ids)
        .order_by("id")
        .values_list(
            "id",
            "cash_fen",
            "promo_fen",
            "arrears_fen",
            "pending_cash_fen",
            "pending_promo_fen",
            "postings",
        )
    )
    return {row[0]: WalletBalance(*row) for row in rows}


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


# The line a posting is shown on in the console's transaction lists: metered usage (every usage
# posting but a monthly rental's) is one line per subject (instance, endpoint replica, disk …)
# per description per day (days in TIME_ZONE); every other posting is a line of its own.
_LINE_KEY = """CASE WHEN kind = 'usage' AND idempotency_key NOT LIKE 'monthly:%%'
    THEN concat_ws('|', COALESCE(NULLIF(instance_id, ''), split_part(idempotency_key, ':', 2)),
                   description, ((created_at AT TIME ZONE %(tz)s)::date)::text)
    ELSE id END"""
_LINES_COUNT = f"""
SELECT count(DISTINCT {_LINE_KEY})
FROM billing_ledgertransaction
WHERE wallet_id = (SELECT id FROM billing_wallet WHERE tenant_id = %(tenant)s)
"""  # noqa: S608 (_LINE_KEY is a constant; the values are parameters)
_LINES_PAGE = f"""
SELECT max(seq), count(*), sum(amount_fen), sum(minutes),
       (array_agg(seq ORDER BY seq DESC))[1:%(shown)s]
FROM billing_ledgertransaction
WHERE wallet_id = (SELECT id FROM billing_wallet WHERE tenant_id = %(tenant)s)
GROUP BY {_LINE_KEY}
ORDER BY max(seq) DESC
OFFSET %(offset)s LIMIT %(limit)s
"""  # noqa: S608 (as above)
# The postings a grouped line lists when opened (a day of hourly postings, cash and trial).
LINE_POSTINGS_SHOWN = 48


@dataclass(frozen=True)
class LedgerLine:
    """One line of a transaction list: a single posting, or a day's usage postings of one
    subject. `last` is its last posting (its time, kind, description and the balance after
    it); `postings` the last LINE_POSTINGS_SHOWN of a group, newest first (empty for a single
    posting)."""

    last: LedgerTransaction
    count: int
    amount_fen: int
    minutes: int
    postings: tuple[LedgerTransaction, ...]

    @property
    def grouped(self) -> bool:
        return self.count > 1

    @property
    def hours(self) -> str:
        """Its minutes in hours, to two decimals at most ("2.5", "24")."""
        return f"{self.minutes / 60:.2f}".rstrip("0").rstrip(".")


class LedgerLines:
    """The tenant's ledger as lines, newest first by the seq of each line's last posting,
    for Paginator: its length and a slice are a query each, grouped in PostgreSQL (a month of
    per-hour postings is never read whole into Python), and a slice reads only its lines'
    postings (one query more)."""

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id

    def __len__(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(_LINES_COUNT, {"tz": settings.TIME_ZONE, "tenant": self.tenant_id})
            return int(cursor.fetchone()[0])

    def __iter__(self) -> Iterator[LedgerLine]:
        return iter(self._lines(0, len(self)))

    @overload
    def __getitem__(self, index: int) -> LedgerLine: ...

    @overload
    def __getitem__(self, index: slice) -> list[LedgerLine]: ...

    def __getitem__(self, index: int | slice) -> LedgerLine | list[LedgerLine]:
        if isinstance(index, int):
            return self._lines(index, index + 1)[0]
        return self._lines(index.start or 0, index.stop)

    def _lines(self, start: int, stop: int) -> list[LedgerLine]:
        params: dict[str, int | str] = {
            "shown": LINE_POSTINGS_SHOWN,
            "tenant": self.tenant_id,
            "tz": settings.TIME_ZONE,
            "offset": start,
            "limit": stop - start,
        }
        with connection.cursor() as cursor:
            cursor.execute(_LINES_PAGE, params)
            groups = cursor.fetchall()
        seqs = [seq for *_, shown in groups for seq in shown]
        rows = {
            txn.seq: txn
            for txn in LedgerTransaction.objects.filter(
                wallet__tenant_id=self.tenant_id, seq__in=seqs
            )
        }
        return [
            LedgerLine(
                last=rows[last],
                count=count,
                amount_fen=int(amount),
                minutes=int(minutes),
                postings=tuple(rows[seq] for seq in shown) if count > 1 else (),
            )
            for last, count, amount, minutes, shown in groups
        ]


def ledger_lines_for_tenant(tenant_id: str) -> LedgerLines:
    return LedgerLines(tenant_id)


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


@dataclass(frozen=True)
class InvoiceFunds:
    """A tenant's money as invoicing counts it (billing.invoices). `paid_fen`: cash paid in
    from outside, top-ups and bank transfers less operators' reversals of them; `carried_fen`:
    the invoiceable portions transfers brought in less those they took out; `returned_fen`:
    refunds pending or done and chargebacks not won back; `invoiced_fen`: invoice requests
    requested or issued. Transfers move invoiceability between wallets and never make any:
    only paid cash adds to it."""

    paid_fen: int = 0
    carried_fen: int = 0
    returned_fen: int = 0
    invoiced_fen: int = 0

    @property
    def uninvoiced_fen(self) -> int:
        """Paid cash kept (with what transfers carried) less invoices: below zero when money
        went back after it was invoiced or moved on."""
        return self.paid_fen + self.carried_fen - self.returned_fen - self.invoiced_fen

    @property
    def invoiceable_fen(self) -> int:
        """What the tenant may still invoice, or carry to another wallet by a transfer."""
        return max(0, self.uninvoiced_fen)

    @property
    def over_invoiced_fen(self) -> int:
        """How far the invoices requested or issued exceed the paid cash kept; 0 when they do
        not."""
        return min(self.invoiced_fen, max(0, -self.uninvoiced_fen))

    @property
    def beyond_paid_fen(self) -> int:
        """How far the invoices, and the invoiceability transfers carried away, exceed what was
        paid in and carried in, refunds aside. invoice_request and transfer_post never let this
        above zero: it is a fault (an invoice that transfers of invoiced money allowed before
        they carried portions, billing migration 0010, or a write around those services)."""
        return max(0, self.invoiced_fen - self.paid_fen - self.carried_fen)


# Paid cash in from outside, and operators' reversals of it.
_PAID_IN = Q(kind__in=PAID_IN_KINDS) | Q(
    kind=TransactionKind.REVERSAL, reverses__kind__in=PAID_IN_KINDS
)


def invoice_funds(tenant_ids: Sequence[str] | None = None) -> dict[str, InvoiceFunds]:
    """The InvoiceFunds of the tenants named (of every tenant with any, for None), by tenant
    id, in four grouped queries; a tenant with none of it is left out."""
    ledger = LedgerTransaction.objects.filter(_PAID_IN | Q(kind=TransactionKind.TRANSFER))
    refunds = Refund.objects.filter(status__in=(RefundStatus.PENDING, RefundStatus.SUCCEEDED))
    disputes = Dispute.objects.filter(
        debit_transaction__isnull=False, credit_transaction__isnull=True
    )
    invoices = InvoiceRequest.objects.filter(status__in=INVOICE_HOLDING)
    if tenant_ids is not None:
        ledger = ledger.filter(wallet__tenant_id__in=tenant_ids)
        refunds = refunds.filter(topup__tenant_id__in=tenant_ids)
        disputes = disputes.filter(topup__tenant_id__in=tenant_ids)
        invoices = invoices.filter(tenant_id__in=tenant_ids)
    parts: dict[str, dict[str, int]] = {}
    for row in ledger.values(tenant=F("wallet__tenant_id")).annotate(
        paid=Sum("cash_delta_fen", filter=_PAID_IN, default=0),
        carried=Sum("invoiceable_delta_fen", default=0),
    ):
        parts.setdefault(row["tenant"], {}).update(paid_fen=row["paid"], carried_fen=row["carried"])
    returned: dict[str, int] = {}
    for query in (refunds, disputes):
        for tenant, fen in query.values_list("topup__tenant_id").annotate(Sum("amount_fen")):
            returned[tenant] = returned.get(tenant, 0) + fen
    for tenant, fen in returned.items():
        parts.setdefault(tenant, {})["returned_fen"] = fen
    for tenant, fen in invoices.values_list("tenant_id").annotate(Sum("amount_fen")):
        parts.setdefault(tenant, {})["invoiced_fen"] = fen
    return {tenant: InvoiceFunds(**fields) for tenant, fields in parts.items()}


def invoice_funds_of(tenant_id: str) -> InvoiceFunds:
    """One tenant's InvoiceFunds. What must hold until commit (an invoice request, a
    transfer's carried portion) is read under the tenant's wallet lock, the lock the ledger
    and refunds post under."""
    return invoice_funds([tenant_id]).get(tenant_id, InvoiceFunds())


def transfer_keys(key: str) -> tuple[str, str]:
    """The ledger keys of a transfer's two legs: out of the source, into the target."""
    return f"transfer:{key}:out", f"transfer:{key}:in"


@dataclass(frozen=True)
class CarryImbalance:
    transfer: str  # the transfer's key, its legs' without ":out" or ":in"
    net_fen: int


def transfer_carry_imbalances() -> list[CarryImbalance]:
    """Transfers whose two legs' invoiceable portions do not net to zero (a transfer moves
    invoiceability; it never makes or destroys it)."""
    key = F("idempotency_key")
    pair = Case(
        When(idempotency_key__endswith=":out", then=Left(key, Length(key) - 4)),
        default=Left(key, Length(key) - 3),
    )
    rows = (
        LedgerTransaction.objects.filter(kind=TransactionKind.TRANSFER)
        .values(transfer=pair)
        .annotate(net=Sum("invoiceable_delta_fen"))
        .exclude(net=0)
        .order_by("transfer")
    )
    return [CarryImbalance(row["transfer"], row["net"]) for row in rows]
