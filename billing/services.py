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
from typing import Any, NamedTuple

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
from billing.selectors import invoice_funds_of, transfer_keys, wallet_locked, wallets_locked
from billing.signals import wallet_credited
from starverse.core.db import bulk_insert, bulk_set
from starverse.core.errors import Conflict, IdempotencyConflict, InsufficientBalance, InvalidInput
from starverse.core.ids import new_ids
from starverse.core.money import format_fen

logger = logging.getLogger(__name__)

CREDIT_KINDS = (TransactionKind.TRIAL, TransactionKind.TOPUP, TransactionKind.BANK_TRANSFER)
DEBIT_KINDS = (TransactionKind.USAGE, TransactionKind.REFUND)
# Debits of these kinds may only take cash: trial money is never refunded or taken back, and it
# pays usage only minute by minute at an offering's trial price (usage_post_many), never a
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
    actor: Any = None,
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
    actor: Any = None,
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
    return LedgerTransaction(
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
    pay = min(wallet.cash_fen, wallet.arrears_fen)
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
            "arrears_fen = %s WHERE id = %s",
            [*params, wallet.cash_fen, wallet.promo_fen, wallet.arrears_fen, wallet.id],
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
    actor: Any = None,
    instance_id: str = "",
    invoiceable_delta_fen: int = 0,
) -> LedgerTransaction:
    """Credit (amount > 0) or debit (amount < 0) a wallet, exactly once per key.

    Credits of promotional kinds land on the promo balance, all others on cash. Debits take
    cash only (CASH_ONLY_DEBITS): trial credit is spent by usage_post_many alone, at trial
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
        promo_spend = 0 if kind in CASH_ONLY_DEBITS else min(wallet.promo_fen, wanted)
        cash_spend = min(wallet.cash_fen, wanted - promo_spend)
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


def transaction_reverse(*, transaction_id: str, reason: str, actor: Any) -> LedgerTransaction:
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
        if wallet.cash_fen < original.cash_delta_fen or wallet.promo_fen < original.promo_delta_fen:
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
    *, wallet_id: str, amount_fen: int, reason: str, actor: Any, key: str | None = None
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
    actor: Any,
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


class Charged(NamedTuple):
    """What one usage charge took: `fen`, and `short` when the balance could not pay it (so
    the instance must stop)."""

    fen: int
    short: bool


def usage_post_many(charges: list[dict[str, Any]]) -> dict[str, Charged]:
    """Post many usage debits at once (the metering tick), each exactly once by its key.
    `charges` items: wallet_id, key, amount_fen (> 0, at the standard price), instance_id,
    description, and trial_amount_fen (the same minute at the offering's trial price, or None
    when it has none). A charge with a trial amount that the wallet's trial credit covers is
    paid from trial credit at that amount; any other from cash at the standard amount, taking
    what is left when cash is short. Returns key → Charged (for a key posted before, what that
    first posting took).

    Batched: wallets are locked in id order, rows are bulk-inserted, and a key posted before
    (by a duplicate or late tick) is returned, not posted again. The rows are plain tuples
    written by COPY, not model objects: a tick of 100,000 instances spent most of its time
    building and saving LedgerTransaction objects."""
    results: dict[str, Charged] = {}
    if not charges:
        return results
    with transaction.atomic():
        before = _charged_before([c["key"] for c in charges])
        for charge in charges:
            if charge["key"] in before:
                fen, kind = before[charge["key"]]
                short = kind != PriceKind.TRIAL and fen < charge["amount_fen"]
                results[charge["key"]] = Charged(fen, short)
        todo = [c for c in charges if c["key"] not in results]
        balances = wallets_locked(sorted({c["wallet_id"] for c in todo}))
        now = timezone.now()
        debits, entries = [], []
        for txn_id, charge in zip(new_ids("txn", len(todo)), todo, strict=True):
            debit = _usage_debit(txn_id, balances[charge["wallet_id"]], charge, now)
            debits.append(debit)
            entries += _usage_entries(debit)
            taken = -debit[5]  # minus its amount
            trial = debit[14] == PriceKind.TRIAL.value
            results[charge["key"]] = Charged(taken, not trial and taken < charge["amount_fen"])
        bulk_insert("billing_ledgertransaction", _USAGE_COLUMNS, debits)
        bulk_insert(
            "billing_ledgerentry", ["transaction_id", "wallet_id", "account", "amount_fen"], entries
        )
        bulk_set(
            Wallet,
            [(wallet_id, cash, promo) for wallet_id, (cash, promo, _arrears) in balances.items()],
            ["cash_fen", "promo_fen"],
        )
    logger.info("ledger.usage_batch posted=%d replayed=%d", len(todo), len(charges) - len(todo))
    return results


def _charged_before(keys: list[str]) -> dict[str, tuple[int, str]]:
    """Key → (fen charged, price kind), for the keys that were posted before."""
    with connection.cursor() as cursor:  # one array parameter, however many keys
        cursor.execute(
            "SELECT idempotency_key, amount_fen, price_kind FROM billing_ledgertransaction "
            "WHERE idempotency_key = ANY(%s)",
            [keys],
        )
        return {key: (-amount, kind) for key, amount, kind in cursor.fetchall()}


# Columns of a usage debit row, in _usage_debit's order.
_USAGE_COLUMNS = [
    "id",
    "wallet_id",
    "kind",
    "idempotency_key",
    "request_hash",
    "amount_fen",
    "instance_id",
    "cash_delta_fen",
    "promo_delta_fen",
    "arrears_delta_fen",
    "cash_after_fen",
    "promo_after_fen",
    "arrears_after_fen",
    "description",
    "price_kind",
    "reason",
    "created_at",
]


def _usage_debit(
    txn_id: str, balance: list[int], charge: dict[str, Any], now: Any
) -> tuple[Any, ...]:
    """The row of one charge's debit against a locked wallet's [cash, promo, arrears]: from
    trial credit at the trial amount when the charge has one and the trial credit covers it,
    else from cash at the standard amount, taking what is left when cash is short; the balance
    in memory follows it (a usage debit never changes arrears)."""
    wanted, trial = charge["amount_fen"], charge.get("trial_amount_fen")
    cash_before, promo_before, arrears = balance
    if trial is not None and promo_before > 0 and promo_before >= trial:
        promo, cash, kind = trial, 0, PriceKind.TRIAL.value
    else:
        promo, cash, kind = 0, min(cash_before, wanted), PriceKind.STANDARD.value
    balance[0], balance[1] = cash_before - cash, promo_before - promo
    wallet_id = charge["wallet_id"]
    request_hash = _request_hash(
        {
            "wallet": wallet_id,
            "kind": TransactionKind.USAGE,
            "amount": -wanted,
            "description": charge["description"],
            "partial": True,
            "instance": charge["instance_id"],
            "reason": "",
            # only a charge with a trial price hashes it: one without is ledger_post's request
            **({"trial": trial} if trial is not None else {}),
        }
    )
    return (
        txn_id,
        wallet_id,
        TransactionKind.USAGE.value,
        charge["key"],
        request_hash,
        -(cash + promo),
        charge["instance_id"],
        -cash,
        -promo,
        0,
        balance[0],
        balance[1],
        arrears,
        charge["description"][:500],
        kind,
        "",
        now,
    )


def _usage_entries(debit: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The legs of a usage debit row, as _entries makes them: cash, promo, and their sum the
    other way on platform revenue."""
    txn_id, wallet_id, amount, cash, promo = debit[0], debit[1], debit[5], debit[7], debit[8]
    legs = [(txn_id, wallet_id, Account.CASH.value, cash)] if cash else []
    if promo:
        legs.append((txn_id, wallet_id, Account.PROMO.value, promo))
    if amount:
        legs.append((txn_id, None, Account.REVENUE.value, -amount))
    return legs
