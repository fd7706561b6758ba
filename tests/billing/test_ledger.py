import random

import pytest
from django.db import DatabaseError, OperationalError, connection, transaction

from billing.choices import Account, TransactionKind
from billing.models import LedgerEntry, LedgerTransaction, Wallet
from billing.selectors import unbalanced_transactions, wallet_drifts
from billing.services import adjustment_post, ledger_post, transaction_reverse
from starverse.core.errors import Conflict, IdempotencyConflict, InsufficientBalance, InvalidInput
from tests.conftest import run_threads
from tests.factories import make_operator, make_user


def _wallet(user) -> Wallet:
    return Wallet.objects.get(tenant=user.tenant)


def _topup(wallet: Wallet, fen: int, key: str) -> LedgerTransaction:
    return ledger_post(
        wallet_id=wallet.id,
        key=key,
        kind=TransactionKind.TOPUP,
        amount_fen=fen,
        description="Top-up",
    )


def _charge(wallet: Wallet, fen: int, key: str, partial: bool = False) -> LedgerTransaction:
    return ledger_post(
        wallet_id=wallet.id,
        key=key,
        kind=TransactionKind.USAGE,
        amount_fen=-fen,
        description="Usage",
        allow_partial=partial,
    )


def test_usage_posted_to_the_ledger_takes_cash_only_never_trial_credit(user):
    # trial credit pays only minutes at an offering's trial price (usage_post_many)
    wallet = _wallet(user)
    _topup(wallet, 5000, "topup:1")

    txn = _charge(wallet, 1500, "usage:a:1")

    wallet.refresh_from_db()
    assert (txn.promo_delta_fen, txn.cash_delta_fen, txn.amount_fen) == (0, -1500, -1500)
    assert (wallet.promo_fen, wallet.cash_fen) == (1000, 3500)
    assert sorted(txn.entries.values_list("account", "amount_fen")) == [
        (Account.CASH, -1500),
        (Account.REVENUE, 1500),
    ]
    assert (txn.cash_after_fen, txn.promo_after_fen, txn.price_kind) == (3500, 1000, "standard")


def test_idempotent_replay_returns_the_first_result_and_conflict_is_refused(user):
    wallet = _wallet(user)
    first = _topup(wallet, 10000, "topup:cs_1")

    replay = _topup(wallet, 10000, "topup:cs_1")
    with pytest.raises(IdempotencyConflict):
        _topup(wallet, 20000, "topup:cs_1")

    assert replay.pk == first.pk
    wallet.refresh_from_db()
    assert wallet.cash_fen == 10000
    assert LedgerTransaction.objects.filter(idempotency_key="topup:cs_1").count() == 1


def test_overdraft_is_refused_or_takes_what_is_left(user):
    wallet = _wallet(user)
    _topup(wallet, 1000, "topup:o")  # ¥10 of cash beside the ¥10 trial, which usage here skips

    with pytest.raises(InsufficientBalance, match=r"¥12\.00 needed, ¥10\.00 available"):
        _charge(wallet, 1200, "usage:x:1")
    partial = _charge(wallet, 1200, "usage:x:2", partial=True)
    empty = _charge(wallet, 300, "usage:x:3", partial=True)

    wallet.refresh_from_db()
    assert partial.amount_fen == -1000
    assert empty.amount_fen == 0
    assert (wallet.cash_fen, wallet.promo_fen) == (0, 1000)
    assert not LedgerTransaction.objects.filter(idempotency_key="usage:x:1").exists()


def test_reversal_restores_each_leg_once(user):
    wallet = _wallet(user)
    operator = make_operator()
    _topup(wallet, 3000, "topup:r")
    charge = _charge(wallet, 2000, "usage:r:1")

    reversal = transaction_reverse(
        transaction_id=charge.id, reason="billing bug #12", actor=operator
    )

    wallet.refresh_from_db()
    assert (reversal.promo_delta_fen, reversal.cash_delta_fen) == (0, 2000)
    assert (wallet.promo_fen, wallet.cash_fen) == (1000, 3000)
    assert reversal.reverses_id == charge.id and reversal.created_by_id == operator.id
    with pytest.raises(Conflict, match="already reversed"):
        transaction_reverse(transaction_id=charge.id, reason="again", actor=operator)
    with pytest.raises(Conflict, match="cannot be reversed"):
        transaction_reverse(transaction_id=reversal.id, reason="undo", actor=operator)
    assert LedgerTransaction.objects.filter(kind=TransactionKind.REVERSAL).count() == 1


def test_reversing_a_credit_that_was_spent_is_refused(user):
    wallet = _wallet(user)
    topup = _topup(wallet, 500, "topup:s")
    _charge(wallet, 400, "usage:s:1")

    with pytest.raises(InsufficientBalance):
        transaction_reverse(transaction_id=topup.id, reason="chargeback", actor=make_operator())
    wallet.refresh_from_db()
    assert (wallet.cash_fen, wallet.promo_fen) == (100, 1000)


def test_adjustments_need_a_reason_and_staff_and_take_cash_only(user):
    wallet = _wallet(user)
    operator = make_operator()

    with pytest.raises(InvalidInput, match="reason"):
        adjustment_post(wallet_id=wallet.id, amount_fen=500, reason="  ", actor=operator)
    with pytest.raises(InvalidInput, match="staff"):
        adjustment_post(wallet_id=wallet.id, amount_fen=500, reason="goodwill", actor=user)
    with pytest.raises(InsufficientBalance):
        adjustment_post(wallet_id=wallet.id, amount_fen=-500, reason="take trial", actor=operator)
    credit = adjustment_post(wallet_id=wallet.id, amount_fen=500, reason="goodwill", actor=operator)

    assert (credit.cash_delta_fen, credit.reason, credit.created_by_id) == (
        500,
        "goodwill",
        operator.id,
    )
    assert credit.idempotency_key.startswith("adj:")
    assert LedgerTransaction.objects.filter(kind=TransactionKind.ADJUSTMENT).count() == 1


@pytest.mark.parametrize("amount", [0, 10**13, 1.5, True])
def test_amounts_must_be_sane_integers(user, amount):
    with pytest.raises(InvalidInput):
        _topup(_wallet(user), amount, f"topup:bad:{amount}")


def test_wrong_sign_for_kind_is_refused(user):
    with pytest.raises(InvalidInput):
        _topup(_wallet(user), -100, "topup:neg")
    with pytest.raises(InvalidInput):
        ledger_post(
            wallet_id=_wallet(user).id,
            key="usage:pos",
            kind=TransactionKind.USAGE,
            amount_fen=100,
            description="x",
        )


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE billing_ledgertransaction SET amount_fen = amount_fen + 1",
        "DELETE FROM billing_ledgertransaction",
        "UPDATE billing_ledgerentry SET amount_fen = 0",
        "DELETE FROM billing_ledgerentry",
    ],
)
def test_raw_update_or_delete_of_ledger_rows_fails(user, statement):
    before = list(LedgerEntry.objects.values_list("id", "amount_fen"))

    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)

    assert list(LedgerEntry.objects.values_list("id", "amount_fen")) == before
    assert LedgerTransaction.objects.count() == 1


@pytest.mark.parametrize("table", ["billing_ledgertransaction", "billing_ledgerentry"])
def test_truncate_of_ledger_tables_fails(transactional_db, table):
    # Committed rows: TRUNCATE in the transaction that wrote them would fail for another
    # reason (pending deferred-constraint events). The flush after this test then shows that
    # the suite's own TRUNCATE still works.
    make_user()
    before = list(LedgerEntry.objects.values_list("id", "amount_fen"))

    with (
        pytest.raises(DatabaseError, match="append-only: TRUNCATE on billing_ledger"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(f"TRUNCATE {table} CASCADE")

    assert list(LedgerEntry.objects.values_list("id", "amount_fen")) == before
    assert LedgerTransaction.objects.count() == 1


def test_wallet_balance_cannot_go_negative_even_by_hand(user):
    with pytest.raises(DatabaseError), transaction.atomic():
        Wallet.objects.filter(tenant=user.tenant).update(promo_fen=-1)


def test_concurrent_mixed_postings_keep_the_balance_equal_to_the_ledger(transactional_db):
    wallet = _wallet(make_user())
    rng = random.Random(7)
    plans = [
        [(rng.choice(["credit", "debit", "partial"]), rng.randint(1, 900)) for _ in range(15)]
        for _ in range(24)
    ]

    def worker(index: int) -> list[str]:
        outcomes = []
        for step, (op, fen) in enumerate(plans[index]):
            key = f"t{index}:{step}"
            try:
                if op == "credit":
                    _topup(wallet, fen, f"topup:{key}")
                else:
                    _charge(wallet, fen, f"usage:{key}", partial=op == "partial")
                outcomes.append("ok")
            except InsufficientBalance:
                outcomes.append("insufficient")
        return outcomes

    results = run_threads(24, worker)

    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors  # no deadlock or serialization failure surfaced
    assert not any(isinstance(r, OperationalError) for r in results)
    wallet.refresh_from_db()
    assert wallet_drifts() == []
    assert unbalanced_transactions() == []
    assert wallet.cash_fen >= 0 and wallet.promo_fen >= 0
    credited = sum(fen for plan in plans for op, fen in plan if op == "credit")
    spent = -sum(
        LedgerTransaction.objects.filter(kind=TransactionKind.USAGE).values_list(
            "amount_fen", flat=True
        )
    )
    assert wallet.total_fen == 1000 + credited - spent
    assert LedgerTransaction.objects.count() == 1 + sum(
        1 for outcomes in results for o in outcomes if o == "ok"
    )


def test_concurrent_replays_of_one_key_post_once(transactional_db):
    wallet = _wallet(make_user())

    results = run_threads(16, lambda i: _topup(wallet, 5000, "topup:cs_race"))

    assert len({r.pk for r in results}) == 1, results
    wallet.refresh_from_db()
    assert wallet.cash_fen == 5000


def test_same_key_on_two_wallets_at_once_is_one_posting_and_one_conflict(transactional_db):
    wallets = [_wallet(make_user()), _wallet(make_user())]

    results = run_threads(2, lambda i: _topup(wallets[i], 700, "topup:shared"))

    assert sorted(type(r).__name__ for r in results) == ["IdempotencyConflict", "LedgerTransaction"]
    assert (
        sum(
            Wallet.objects.filter(pk__in=[w.pk for w in wallets]).values_list("cash_fen", flat=True)
        )
        == 700
    )
