"""The ledger's only writer. Every change of a wallet's balance is a LedgerTransaction posted
here, inside one database transaction that holds the wallet's row lock, writes the transaction
and its balanced entries, and updates the cached balances.

No balance goes below zero. Money the platform lost and could not take from cash (a chargeback,
a refund made in the Stripe dashboard) becomes arrears through an explicit `arrears` posting
(arrears_debit_post); any later cash credit pays arrears off first, in an `arrears` posting of
its own keyed by the credit."""

import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.choices import (
    COUNTER_ACCOUNT,
    PROMO_CREDIT_KINDS,
    WALLET_ACCOUNTS,
    Account,
    PriceKind,
    TransactionKind,
)
from billing.models import LedgerEntry, LedgerTransaction, Wallet
from billing.selectors import (
    WalletBalance,
    invoice_funds_of,
    transfer_keys,
    wallet_locked,
    wallets_locked,
)
from billing.signals import wallet_credited
from starverse.core.db import bulk_insert, bulk_set
from starverse.core.errors import Conflict, IdempotencyConflict, InsufficientBalance, InvalidInput
from starverse.core.ids import new_ids
from starverse.core.money import format_fen

if TYPE_CHECKING:
    from starverse.accounts.models import User

logger = logging.getLogger(__name__)

CREDIT_KINDS = (TransactionKind.TRIAL, TransactionKind.TOPUP, TransactionKind.BANK_TRANSFER)
DEBIT_KINDS = (TransactionKind.USAGE, TransactionKind.REFUND)
# Debits of these kinds may only take cash: trial money is never refunded or taken back, and it
# pays usage only minute by minute at an offering's trial price (usage_accrue_many), never a
# monthly rental, storage or any other usage posted here.
CASH_ONLY_DEBITS = (
    TransactionKind.REFUND,
    TransactionKind.ADJUSTMENT,
    TransactionKind.CHARGEBACK,
    TransactionKind.TRANSFER,
    TransactionKind.USAGE,
)
# Postings an operator does not reverse by hand: a dispute's outcome (or a credit) settles them.
NOT_REVERSIBLE = (TransactionKind.REVERSAL, TransactionKind.CHARGEBACK, TransactionKind.ARREARS)
# The causes that may drive a wallet into arrears (the counter account of the arrears posting).
ARREARS_CAUSES = (TransactionKind.CHARGEBACK, TransactionKind.REFUND)
MAX_AMOUNT_FEN = 10**12
TRIAL_KEY_MAX_LENGTH = LedgerTransaction._meta.get_field("idempotency_key").max_length or 200

# A posting's change of (cash, promo, arrears) on the locked wallet.
Split = Callable[[Wallet], tuple[int, int, int]]


def _request_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def _existing(key: str, request_hash: str) -> LedgerTransaction | None:
    # Raw SQL: every posting asks this first, and nearly always the answer is "no row".
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT request_hash FROM billing_ledgertransaction WHERE idempotency_key = %s", [key]
        )
        row = cursor.fetchone()
    if row is None:
        return None
    if row[0] != request_hash:
        raise IdempotencyConflict(
            _("Idempotency key %(key)s was already used for a different request.") % {"key": key}
        )
    return LedgerTransaction.objects.get(idempotency_key=key)


def wallet_credited_after_commit(wallet_id: str, amount_fen: int) -> None:
    """Tell listeners (storage arrears, say) that money came in from outside — a top-up, a
    bank transfer, an operator's credit — once the posting has committed."""

    def send() -> None:
        tenant_id = Wallet.objects.values_list("tenant_id", flat=True).get(pk=wallet_id)
        wallet_credited.send(
            sender=Wallet, wallet_id=wallet_id, tenant_id=tenant_id, amount_fen=amount_fen
        )

    transaction.on_commit(send)


def _post(
    *,
    wallet_id: str,
    key: str,
    kind: str,
    request: dict[str, Any],
    split: Split,
    counter: str,
    description: str,
    reason: str = "",
    actor: "User | None" = None,
    instance_id: str = "",
    reverses: LedgerTransaction | None = None,
    invoiceable_delta_fen: int = 0,
) -> LedgerTransaction:
    request_hash = _request_hash({"wallet": wallet_id, "kind": kind, **request})
    # usage posted here is paid from cash at the standard price (CASH_ONLY_DEBITS)
    price_kind = PriceKind.STANDARD if kind == TransactionKind.USAGE else ""
    # A replay is answered without taking the lock; a replay racing its original is decided
    # by the unique key below, and the loser returns the winner's row.
    found = _existing(key, request_hash)
    if found is not None:
        return found
    try:
        with transaction.atomic():
            wallet = wallet_locked(wallet_id=wallet_id)
            cash_delta, promo_delta, arrears_delta = split(wallet)
            txn = _transaction(
                wallet,
                kind=kind,
                key=key,
                request_hash=request_hash,
                deltas=(cash_delta, promo_delta, arrears_delta),
                description=description,
                reason=reason,
                actor=actor,
                instance_id=instance_id,
                reverses=reverses,
                price_kind=price_kind,
                invoiceable_delta_fen=invoiceable_delta_fen,
            )
            paid = _arrears_pay(wallet, txn) if cash_delta > 0 else None
            _write(wallet, [(txn, counter), *([(paid, Account.ADJUSTMENTS)] if paid else [])])
    except IntegrityError:
        found = _existing(key, request_hash)
        if found is None:
            raise
        return found
    for posted in (txn, paid):
        if posted is not None:
            logger.info(
                "ledger.post txn=%s wallet=%s kind=%s amount_fen=%d arrears_delta_fen=%d key=%s",
                posted.id,
                wallet_id,
                posted.kind,
                posted.amount_fen,
                posted.arrears_delta_fen,
                posted.idempotency_key,
            )
    return txn


def _transaction(
    wallet: Wallet,
    *,
    kind: str,
    key: str,
    request_hash: str,
    deltas: tuple[int, int, int],
    description: str,
    reason: str = "",
    actor: "User | None" = None,
    instance_id: str = "",
    reverses: LedgerTransaction | None = None,
    price_kind: str = "",
    invoiceable_delta_fen: int = 0,
) -> LedgerTransaction:
    """The (unsaved) transaction applying `deltas` to the locked wallet, whose balances in
    memory follow it."""
    cash_delta, promo_delta, arrears_delta = deltas
    wallet.cash_fen += cash_delta
    wallet.promo_fen += promo_delta
    wallet.arrears_fen += arrears_delta
    wallet.postings += 1
    return LedgerTransaction(
        seq=wallet.postings,
        wallet=wallet,
        kind=kind,
        idempotency_key=key,
        request_hash=request_hash,
        amount_fen=cash_delta + promo_delta - arrears_delta,
        cash_delta_fen=cash_delta,
        promo_delta_fen=promo_delta,
        arrears_delta_fen=arrears_delta,
        cash_after_fen=wallet.cash_fen,
        promo_after_fen=wallet.promo_fen,
        arrears_after_fen=wallet.arrears_fen,
        invoiceable_delta_fen=invoiceable_delta_fen,
        description=description[:500],
        price_kind=price_kind,
        reason=reason,
        created_by=actor if getattr(actor, "pk", None) else None,
        instance_id=instance_id,
        reverses=reverses,
    )


def _arrears_pay(wallet: Wallet, credit: LedgerTransaction) -> LedgerTransaction | None:
    """Inside a cash credit's posting: pay what the wallet owes from the cash that came in, as
    an `arrears` posting keyed by the credit (so it happens exactly when the credit does). Its
    amount is zero: cash and the debt shrink together."""
    pay = min(wallet.cash_free_fen, wallet.arrears_fen)
    if pay <= 0:
        return None
    txn = _transaction(
        wallet,
        kind=TransactionKind.ARREARS,
        key=f"arrears-paid:{credit.id}",
        request_hash=_request_hash({"pays_from": credit.id, "amount": pay}),
        deltas=(-pay, 0, -pay),
        description=gettext_noop("Arrears paid"),
        reason=f"Paid from {credit.id} ({credit.kind})",
    )
    return txn


# The columns of a posting, in the order _write inserts them.
_TXN_FIELDS = list(LedgerTransaction._meta.concrete_fields)
_TXN_INSERT = "INSERT INTO billing_ledgertransaction ({}) VALUES ({})".format(  # noqa: S608
    ", ".join(str(f.column) for f in _TXN_FIELDS), ", ".join(["%s"] * len(_TXN_FIELDS))
)


def _write(wallet: Wallet, postings: list[tuple[LedgerTransaction, str]]) -> None:
    """Insert the postings (each with its entries against its counter account) and set the
    locked wallet's cached balances, in one statement: one round trip instead of three (the
    ledger's hot path). A key or reversal already taken raises IntegrityError as before."""
    parts, params = [], []
    for n, (txn, counter) in enumerate(postings):
        parts.append(f"t{n} AS ({_TXN_INSERT})")
        params += [f.get_db_prep_save(getattr(txn, f.attname), connection) for f in _TXN_FIELDS]
        entries = _entries(txn, counter)
        if entries:
            marks = ", ".join(["(%s, %s, %s, %s)"] * len(entries))
            parts.append(
                f"e{n} AS (INSERT INTO billing_ledgerentry "  # noqa: S608 - placeholders only
                f"(transaction_id, wallet_id, account, amount_fen) VALUES {marks})"
            )
            params += [v for e in entries for v in (txn.id, e.wallet_id, e.account, e.amount_fen)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH {', '.join(parts)} UPDATE billing_wallet "  # noqa: S608 - placeholders only
            "SET cash_fen = %s, promo_fen = %s, "
            "arrears_fen = %s, postings = %s WHERE id = %s",
            [
                *params,
                wallet.cash_fen,
                wallet.promo_fen,
                wallet.arrears_fen,
                wallet.postings,
                wallet.id,
            ],
        )
    for txn, _counter in postings:  # as after save(): a row of the database now
        txn._state.adding, txn._state.db = False, "default"


def _entries(txn: LedgerTransaction, counter: str) -> list[LedgerEntry]:
    """The legs of a posting: the wallet's cash, promo and arrears changes that it made (owing
    more is a negative arrears leg), and their sum the other way on the counter account, so
    that every transaction's entries add up to zero."""
    legs = [
        (Account.CASH, txn.cash_delta_fen),
        (Account.PROMO, txn.promo_delta_fen),
        (Account.ARREARS, -txn.arrears_delta_fen),
    ]
    entries = [
        LedgerEntry(transaction=txn, wallet_id=txn.wallet_id, account=account, amount_fen=amount)
        for account, amount in legs
        if amount
    ]
    if txn.amount_fen:
        entries.append(LedgerEntry(transaction=txn, account=counter, amount_fen=-txn.amount_fen))
    return entries


def _check_amount(kind: str, amount_fen: int) -> None:
    if isinstance(amount_fen, bool) or not isinstance(amount_fen, int):
        raise InvalidInput(_("Amounts are whole numbers of fen."))
    if amount_fen == 0 or abs(amount_fen) > MAX_AMOUNT_FEN:
        raise InvalidInput(_("The amount must be non-zero and at most ¥10,000,000,000."))
    if kind in CREDIT_KINDS and amount_fen < 0:
        raise InvalidInput(_("A %(kind)s must be positive.") % {"kind": kind})
    if kind in DEBIT_KINDS and amount_fen > 0:
        raise InvalidInput(_("A %(kind)s must be negative.") % {"kind": kind})


def ledger_post(
    *,
    wallet_id: str,
    key: str,
    kind: TransactionKind,
    amount_fen: int,
    description: str,
    allow_partial: bool = False,
    reason: str = "",
    actor: "User | None" = None,
    instance_id: str = "",
    invoiceable_delta_fen: int = 0,
) -> LedgerTransaction:
    """Credit (amount > 0) or debit (amount < 0) a wallet, exactly once per key.

    Credits of promotional kinds land on the promo balance, all others on cash. Debits take
    cash only (CASH_ONLY_DEBITS): trial credit is spent by usage_accrue_many alone, at trial
    prices. A debit larger than what is
    left raises InsufficientBalance, or with allow_partial takes what is left: a balance never
    goes below zero. `invoiceable_delta_fen`: a transfer leg's carried portion (transfer_post
    decides it); no other kind carries one."""
    if kind in (TransactionKind.REVERSAL, TransactionKind.ARREARS):
        raise InvalidInput("Use transaction_reverse or arrears_debit_post for this kind.")
    if invoiceable_delta_fen and kind != TransactionKind.TRANSFER:
        raise InvalidInput("Only a transfer carries an invoiceable portion.")
    _check_amount(kind, amount_fen)

    def split(wallet: Wallet) -> tuple[int, int, int]:
        if amount_fen > 0:
            return (0, amount_fen, 0) if kind in PROMO_CREDIT_KINDS else (amount_fen, 0, 0)
        wanted = -amount_fen
        # money held by accrued usage is spent already (compute.metering)
        promo_spend = 0 if kind in CASH_ONLY_DEBITS else min(wallet.promo_free_fen, wanted)
        cash_spend = min(wallet.cash_free_fen, wanted - promo_spend)
        if promo_spend + cash_spend < wanted and not allow_partial:
            raise InsufficientBalance(
                _("Insufficient balance: %(need)s needed, %(have)s available.")
                % {"need": format_fen(wanted), "have": format_fen(promo_spend + cash_spend)}
            )
        return -cash_spend, -promo_spend, 0

    return _post(
        wallet_id=wallet_id,
        key=key,
        kind=kind,
        request={
            "amount": amount_fen,
            "description": description,
            "partial": allow_partial,
            "instance": instance_id,
            "reason": reason,
        },
        split=split,
        counter=COUNTER_ACCOUNT[kind],
        description=description,
        reason=reason,
        actor=actor,
        instance_id=instance_id,
        invoiceable_delta_fen=invoiceable_delta_fen,
    )


def transaction_reverse(
    *, transaction_id: str, reason: str, actor: "User | None"
) -> LedgerTransaction:
    """Post the exact opposite of a transaction, leg by leg. A transaction is reversed at most
    once (a unique reference enforces it) and a reversal is never itself reversed."""
    if not reason.strip():
        raise InvalidInput(_("A reason is required."))
    original = LedgerTransaction.objects.get(pk=transaction_id)
    transaction_reversible_check(original)
    if LedgerTransaction.objects.filter(reverses=original).exists():
        raise Conflict(_("Transaction %(id)s is already reversed.") % {"id": original.id})
    counter = original.entries.exclude(account__in=WALLET_ACCOUNTS).first()

    def split(wallet: Wallet) -> tuple[int, int, int]:
        if (
            wallet.cash_free_fen < original.cash_delta_fen
            or wallet.promo_free_fen < original.promo_delta_fen
        ):
            raise InsufficientBalance(
                _("The balance no longer holds the money this transaction credited.")
            )
        return -original.cash_delta_fen, -original.promo_delta_fen, 0

    try:
        return _post(
            wallet_id=original.wallet_id,
            key=f"rev:{original.id}",
            kind=TransactionKind.REVERSAL,
            request={"reverses": original.id, "reason": reason},
            split=split,
            counter=counter.account if counter else Account.ADJUSTMENTS,
            description=f"Reversal of {original.id}",
            reason=reason,
            actor=actor,
            instance_id=original.instance_id,
            reverses=original,
        )
    except IdempotencyConflict:
        raise Conflict(_("Transaction %(id)s is already reversed.") % {"id": original.id}) from None


def transaction_reversible_check(original: LedgerTransaction) -> None:
    """Reversals, chargebacks and arrears postings are not reversed by hand: a reversal is
    corrected by an adjustment, a chargeback by its dispute's outcome, and arrears are paid
    off by any cash credit (an adjustment, to forgive them)."""
    if original.kind == TransactionKind.REVERSAL:
        raise Conflict(_("A reversal cannot be reversed; post an adjustment instead."))
    if original.kind in NOT_REVERSIBLE:
        raise Conflict(
            _(
                "A %(kind)s posting cannot be reversed: a won dispute credits it back, and a "
                "cash adjustment pays off arrears."
            )
            % {"kind": TransactionKind(original.kind).label.lower()}
        )


def arrears_debit_post(
    *,
    wallet_id: str,
    key: str,
    kind: TransactionKind,
    amount_fen: int,
    description: str,
    reason: str,
) -> tuple[LedgerTransaction, LedgerTransaction | None]:
    """Take money the platform has already lost (a chargeback, a refund made outside this
    platform) from the wallet: its cash first, by one posting of `kind` under `key`, then
    what cash could not cover as arrears, by an explicit `arrears` posting under `key:arrears`
    (booked against the same platform account). Returns (debit, arrears posting or None).

    Exactly once per key: a replay finds the debit and derives the same shortfall from it, so
    it neither debits again nor owes more."""
    if kind not in ARREARS_CAUSES:
        raise InvalidInput(f"{kind} postings cannot go into arrears.")
    if not reason.strip():
        raise InvalidInput(_("A reason is required."))
    with transaction.atomic():
        debit = ledger_post(
            wallet_id=wallet_id,
            key=key,
            kind=kind,
            amount_fen=-amount_fen,
            description=description,
            allow_partial=True,
            reason=reason,
        )
        shortfall = amount_fen + debit.amount_fen
        if shortfall <= 0:
            return debit, None
        owed = _post(
            wallet_id=wallet_id,
            key=f"{key}:arrears",
            kind=TransactionKind.ARREARS,
            request={"amount": shortfall, "after": debit.id, "reason": reason},
            split=lambda wallet: (0, 0, shortfall),
            counter=COUNTER_ACCOUNT[kind],
            description=gettext_noop("Into arrears"),
            reason=f"{reason}; {format_fen(shortfall)} more than the cash held after {debit.id}",
        )
    return debit, owed


def trial_key(canonical_email: str) -> str:
    """`trial:{canonical address}`; an address too long for the key column goes by its
    SHA-256 (`trial:sha256:{hex}`)."""
    key = f"trial:{canonical_email}"
    if len(key) <= TRIAL_KEY_MAX_LENGTH:
        return key
    return "trial:sha256:" + hashlib.sha256(canonical_email.encode()).hexdigest()


def trial_grant(*, wallet_id: str, canonical_email: str) -> LedgerTransaction | None:
    """The trial credit, once per canonical address (its ledger key): this wallet's grant (made
    now or before), or None when the address's trial went to another wallet. Under concurrent
    grants to two wallets the key's unique index decides, and the loser gets None."""
    key = trial_key(canonical_email)
    try:
        return ledger_post(
            wallet_id=wallet_id,
            key=key,
            kind=TransactionKind.TRIAL,
            amount_fen=settings.TRIAL_CREDIT_FEN,
            description=gettext_noop("Trial credit"),
        )
    except IdempotencyConflict:
        # the key is taken: by another wallet, or by this one when the amount has changed since
        earlier = LedgerTransaction.objects.get(idempotency_key=key)
        return earlier if earlier.wallet_id == wallet_id else None


def adjustment_post(
    *, wallet_id: str, amount_fen: int, reason: str, actor: "User", key: str | None = None
) -> LedgerTransaction:
    """An operator's credit or debit of cash, with the reason and the operator recorded."""
    if not reason.strip():
        raise InvalidInput(_("A reason is required for every adjustment."))
    if not getattr(actor, "is_staff", False):
        raise InvalidInput(_("Only staff can post adjustments."))
    txn = ledger_post(
        wallet_id=wallet_id,
        key=key or f"adj:{uuid.uuid4()}",
        kind=TransactionKind.ADJUSTMENT,
        amount_fen=amount_fen,
        description=gettext_noop("Adjustment by operator"),
        reason=reason.strip(),
        actor=actor,
    )
    if amount_fen > 0:
        wallet_credited_after_commit(wallet_id, amount_fen)
    return txn


def transfer_post(
    *,
    from_tenant_id: str,
    to_tenant_id: str,
    amount_fen: int,
    key: str,
    actor: "User",
    description: str,
) -> tuple[LedgerTransaction, LedgerTransaction]:
    """Move cash from one wallet to another (a person's own and a team's), exactly once per
    `key`: a debit of the source's cash and a credit of the target's, both against the
    transfers account, so together they net to zero, in one database transaction with both
    wallets locked in id order. Trial credit never moves: the debit takes cash only, and a
    source without enough cash is refused whole (402).

    The transfer carries invoiceability as much as the source still has (paid cash not yet
    invoiced, billing.selectors.InvoiceFunds), up to its amount: -x on the debit, +x on the
    credit. Cash already invoiced, or never paid (an operator's credit), moves without it, so
    money moved round wallets is invoiced once. Read under the source's lock, the lock invoice
    requests and refunds take, so it holds until commit."""
    if isinstance(amount_fen, bool) or not isinstance(amount_fen, int) or amount_fen <= 0:
        raise InvalidInput(_("amount_fen: a positive whole number of fen."), code="invalid_amount")
    source = Wallet.objects.only("id").get(tenant_id=from_tenant_id).pk
    target = Wallet.objects.only("id").get(tenant_id=to_tenant_id).pk
    out_key, in_key = transfer_keys(key)
    with transaction.atomic():
        for wallet_id in sorted([source, target]):
            wallet_locked(wallet_id=wallet_id)
        # a replay returns its first rows, with the portion decided then
        carried = min(amount_fen, invoice_funds_of(from_tenant_id).invoiceable_fen)
        out = ledger_post(
            wallet_id=source,
            key=out_key,
            kind=TransactionKind.TRANSFER,
            amount_fen=-amount_fen,
            description=description,
            reason=f"to {to_tenant_id}",
            actor=actor,
            invoiceable_delta_fen=-carried,
        )
        into = ledger_post(
            wallet_id=target,
            key=in_key,
            kind=TransactionKind.TRANSFER,
            amount_fen=amount_fen,
            description=description,
            reason=f"from {from_tenant_id}",
            actor=actor,
            invoiceable_delta_fen=carried,
        )
    return out, into


def wallet_create(*, tenant_id: str) -> Wallet:
    return Wallet.objects.create(tenant_id=tenant_id)


def minute_charge_fen(price_per_hour_fen: int, minute: int) -> int:
    """Cumulative rounding: minute m costs round(p·m/60) − round(p·(m−1)/60), so any 60
    consecutive minutes from the start cost exactly the hourly price. Rounds half up."""

    def cumulative(m: int) -> int:
        return (price_per_hour_fen * m * 2 + 60) // 120

    return cumulative(minute) - cumulative(minute - 1)


def trial_minutes(promo_fen: int, trial_price_per_hour_fen: int) -> int:
    """How many minutes of a session `promo_fen` of trial credit pays at this trial price: the
    most minutes m whose cumulative charge round(p·m/60) (minute_charge_fen's rule) fits."""
    if promo_fen <= 0 or trial_price_per_hour_fen <= 0:
        return 0
    # (2·p·m + 60) // 120 ≤ promo  ⟺  2·p·m < 120·(promo + 1) − 60
    return (120 * promo_fen + 59) // (2 * trial_price_per_hour_fen)


class Accrual(NamedTuple):
    """One minute of a holding's usage, to hold against its wallet (compute.metering):
    `amount_fen` at the offering's standard price, `trial_amount_fen` at its trial price (None
    when it has none)."""

    wallet_id: str
    amount_fen: int
    trial_amount_fen: int | None


class Accrued(NamedTuple):
    """What one minute holds: from cash, or from trial credit at the trial price (`trial`),
    and `short` when the free cash could not pay the whole minute (it took what was left: the
    holding must stop)."""

    cash_fen: int
    promo_fen: int
    short: bool
    trial: bool = False


def usage_accrue_many(accruals: list[Accrual]) -> list[Accrued]:
    """Hold each minute against its wallet, in order: from free trial credit at the trial
    amount when the minute has one and the free trial credit covers it, else from free cash at
    the standard amount, taking what is left when cash is short. Nothing is posted: the held
    amounts are the wallets' pending ones, which usage_settle_many posts. Call it inside the
    transaction that adds the same amounts to the holdings (compute.metering), so the two never
    part; wallets are locked in id order."""
    if not accruals:
        return []
    wallets = wallets_locked(sorted({a.wallet_id for a in accruals}))
    accrued = []
    for accrual in accruals:
        wallet, trial = wallets[accrual.wallet_id], accrual.trial_amount_fen
        free_promo = wallet.promo_fen - wallet.pending_promo_fen
        if trial is not None and free_promo > 0 and free_promo >= trial:
            wallet.pending_promo_fen += trial
            accrued.append(Accrued(0, trial, short=False, trial=True))
            continue
        cash = min(wallet.cash_fen - wallet.pending_cash_fen, accrual.amount_fen)
        wallet.pending_cash_fen += cash
        accrued.append(Accrued(cash, 0, short=cash < accrual.amount_fen))
    bulk_set(
        Wallet,
        [(w.id, w.pending_cash_fen, w.pending_promo_fen) for w in wallets.values()],
        ["pending_cash_fen", "pending_promo_fen"],
    )
    return accrued


class Settlement(NamedTuple):
    """A holding's accrued minutes, to post: `key` names the minutes (`usage:{instance}:
    {session}:{first}-{last}`), `resource_id` is what the ledger's instance_id names (an
    instance or an endpoint); `trial_minutes` of the `minutes` were held from trial credit
    (`promo_fen`), the rest from cash (`cash_fen`)."""

    wallet_id: str
    key: str
    resource_id: str
    description: str
    minutes: int
    trial_minutes: int
    cash_fen: int
    promo_fen: int


def usage_settle_many(settlements: list[Settlement]) -> int:
    """Post each settlement's accrued minutes: one usage posting from cash at the standard
    price under its key, and one from trial credit at the trial price under `{key}:trial`
    when some minutes were (each only when it has minutes). A posting takes its amount from
    the balance and from the pending amount together, so what is free does not change.

    Exactly once per key: a key posted before (same request) is left as it is (its posting
    released its hold); a different request under it is a conflict. Call it inside the
    transaction that clears the holdings' pending amounts. Returns how many postings were
    written."""
    parts = [part for s in settlements for part in _settlement_parts(s)]
    if not parts:
        return 0
    before = _posted_before([p.key for p in parts])
    wallets = wallets_locked(sorted({p.wallet_id for p in parts}))
    now, rows, entries = timezone.now(), [], []
    ids = iter(new_ids("txn", len(parts)))
    for part in parts:
        if part.key in before:
            # posted before, with its hold released in the same transaction: nothing more
            if before[part.key] != part.request_hash:
                raise IdempotencyConflict(f"usage key {part.key} was posted with other amounts")
            continue
        wallet = wallets[part.wallet_id]
        wallet.pending_cash_fen -= part.cash_fen
        wallet.pending_promo_fen -= part.promo_fen
        wallet.cash_fen -= part.cash_fen
        wallet.promo_fen -= part.promo_fen
        wallet.postings += 1
        row = _usage_row(next(ids), part, wallet, now)
        rows.append(row)
        entries += _usage_entries(row)
    bulk_insert("billing_ledgertransaction", list(UsageRow._fields), rows)
    bulk_insert(
        "billing_ledgerentry", ["transaction_id", "wallet_id", "account", "amount_fen"], entries
    )
    bulk_set(
        Wallet,
        [
            (w.id, w.cash_fen, w.promo_fen, w.pending_cash_fen, w.pending_promo_fen, w.postings)
            for w in wallets.values()
        ],
        ["cash_fen", "promo_fen", "pending_cash_fen", "pending_promo_fen", "postings"],
    )
    logger.info("ledger.usage_settled posted=%d replayed=%d", len(rows), len(parts) - len(rows))
    return len(rows)


class _Part(NamedTuple):
    """One usage posting of a settlement: its cash part or its trial part."""

    wallet_id: str
    key: str
    resource_id: str
    description: str
    minutes: int
    cash_fen: int
    promo_fen: int

    @property
    def price_kind(self) -> str:
        return PriceKind.TRIAL.value if self.promo_fen else PriceKind.STANDARD.value

    @property
    def request_hash(self) -> str:
        return _request_hash(
            {
                "wallet": self.wallet_id,
                "kind": TransactionKind.USAGE,
                "amount": -(self.cash_fen + self.promo_fen),
                "minutes": self.minutes,
                "price_kind": self.price_kind,
                "instance": self.resource_id,
                "description": self.description,
            }
        )


def _settlement_parts(s: Settlement) -> list[_Part]:
    common = (s.wallet_id, s.key, s.resource_id, s.description)
    cash = _Part(*common, s.minutes - s.trial_minutes, s.cash_fen, 0)
    trial = _Part(s.wallet_id, f"{s.key}:trial", *common[2:], s.trial_minutes, 0, s.promo_fen)
    return [part for part in (cash, trial) if part.minutes > 0]


def _posted_before(keys: list[str]) -> dict[str, str]:
    """Key → request hash, for the keys that were posted before."""
    with connection.cursor() as cursor:  # one array parameter, however many keys
        cursor.execute(
            "SELECT idempotency_key, request_hash FROM billing_ledgertransaction "
            "WHERE idempotency_key = ANY(%s)",
            [keys],
        )
        return dict(cursor.fetchall())


class UsageRow(NamedTuple):
    """A usage posting as written by COPY (field names are the columns): plain values, not
    model objects, since a tick may post for every running holding at once."""

    id: str
    wallet_id: str
    kind: str
    idempotency_key: str
    request_hash: str
    amount_fen: int
    instance_id: str
    minutes: int
    cash_delta_fen: int
    promo_delta_fen: int
    arrears_delta_fen: int
    cash_after_fen: int
    promo_after_fen: int
    arrears_after_fen: int
    description: str
    price_kind: str
    reason: str
    seq: int
    created_at: datetime


def _usage_row(txn_id: str, part: _Part, wallet: WalletBalance, now: datetime) -> UsageRow:
    """The posting of one part against its locked wallet, whose balances already follow it
    (a usage posting never changes arrears)."""
    return UsageRow(
        id=txn_id,
        wallet_id=part.wallet_id,
        kind=TransactionKind.USAGE.value,
        idempotency_key=part.key,
        request_hash=part.request_hash,
        amount_fen=-(part.cash_fen + part.promo_fen),
        instance_id=part.resource_id,
        minutes=part.minutes,
        cash_delta_fen=-part.cash_fen,
        promo_delta_fen=-part.promo_fen,
        arrears_delta_fen=0,
        cash_after_fen=wallet.cash_fen,
        promo_after_fen=wallet.promo_fen,
        arrears_after_fen=wallet.arrears_fen,
        description=part.description[:500],
        price_kind=part.price_kind,
        reason="",
        seq=wallet.postings,
        created_at=now,
    )


def _usage_entries(row: UsageRow) -> list[tuple[str, str | None, str, int]]:
    """The legs of a usage posting, as _entries makes them: cash, promo, and their sum the
    other way on platform revenue."""
    legs: list[tuple[str, str | None, str, int]] = []
    if row.cash_delta_fen:
        legs.append((row.id, row.wallet_id, Account.CASH.value, row.cash_delta_fen))
    if row.promo_delta_fen:
        legs.append((row.id, row.wallet_id, Account.PROMO.value, row.promo_delta_fen))
    if row.amount_fen:
        legs.append((row.id, None, Account.REVENUE.value, -row.amount_fen))
    return legs
