"""Arrears in the ledger: money the platform lost beyond a wallet's cash is owed through an
explicit `arrears` posting, never a negative balance, and the next cash credit pays it first."""

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from billing.choices import Account, TransactionKind
from billing.models import LedgerTransaction, Wallet
from billing.selectors import unbalanced_transactions, wallet_drifts
from billing.services import (
    Accrual,
    Accrued,
    Settlement,
    adjustment_post,
    arrears_debit_post,
    ledger_post,
    usage_accrue_many,
    usage_settle_many,
)
from starverse.core.errors import InvalidInput
from tests.factories import fund, make_operator, make_user


def _wallet(user) -> Wallet:
    return Wallet.objects.get(tenant=user.tenant)


def _chargeback(wallet: Wallet, fen: int, key: str = "dispute:dp_1"):
    return arrears_debit_post(
        wallet_id=wallet.id,
        key=key,
        kind=TransactionKind.CHARGEBACK,
        amount_fen=fen,
        description="Chargeback",
        reason="Stripe dispute dp_1, event evt_1",
    )


def test_cash_first_then_arrears_never_the_trial_credit_and_once_per_key(user):
    wallet = _wallet(user)
    fund(user, 3_000)

    debit, owed = _chargeback(wallet, 5_000)
    replay = _chargeback(wallet, 5_000)

    wallet.refresh_from_db()
    assert (wallet.cash_fen, wallet.promo_fen, wallet.arrears_fen, wallet.total_fen) == (
        0,
        1_000,
        2_000,
        -1_000,
    )
    assert (debit.kind, debit.cash_delta_fen, debit.promo_delta_fen) == ("chargeback", -3_000, 0)
    assert owed is not None
    assert (owed.kind, owed.amount_fen, owed.arrears_delta_fen, owed.arrears_after_fen) == (
        "arrears",
        -2_000,
        2_000,
        2_000,
    )
    assert "dp_1" in owed.reason and "evt_1" in owed.reason
    assert sorted(debit.entries.values_list("account", "amount_fen")) == [
        (Account.CASH, -3_000),
        (Account.CHARGEBACKS, 3_000),
    ]
    assert replay == (debit, owed)
    assert LedgerTransaction.objects.filter(kind__in=["chargeback", "arrears"]).count() == 2
    assert wallet_drifts() == [] and unbalanced_transactions() == []


def test_a_debit_that_cash_covers_owes_nothing(user):
    wallet = _wallet(user)
    fund(user, 9_000)

    debit, owed = _chargeback(wallet, 5_000)

    wallet.refresh_from_db()
    assert (debit.amount_fen, owed, wallet.cash_fen, wallet.arrears_fen) == (-5_000, None, 4_000, 0)


def test_only_chargebacks_and_refunds_go_into_arrears(user):
    wallet = _wallet(user)

    with pytest.raises(InvalidInput):
        arrears_debit_post(
            wallet_id=wallet.id,
            key="usage:x",
            kind=TransactionKind.USAGE,
            amount_fen=100,
            description="Usage",
            reason="x",
        )
    with pytest.raises(InvalidInput):
        ledger_post(
            wallet_id=wallet.id,
            key="arrears:x",
            kind=TransactionKind.ARREARS,
            amount_fen=-100,
            description="x",
        )
    assert LedgerTransaction.objects.filter(wallet=wallet).count() == 1  # the trial


def test_an_operator_credit_pays_the_arrears_first(user):
    wallet = _wallet(user)
    _chargeback(wallet, 2_500)

    credit = adjustment_post(
        wallet_id=wallet.id, amount_fen=2_000, reason="goodwill", actor=make_operator()
    )

    paid = LedgerTransaction.objects.get(idempotency_key=f"arrears-paid:{credit.id}")
    assert (paid.kind, paid.amount_fen, paid.cash_delta_fen, paid.arrears_delta_fen) == (
        "arrears",
        0,
        -2_000,
        -2_000,
    )
    assert sorted(paid.entries.values_list("account", "amount_fen")) == [
        (Account.ARREARS, 2_000),
        (Account.CASH, -2_000),
    ]
    wallet.refresh_from_db()
    assert (wallet.cash_fen, wallet.arrears_fen, wallet.total_fen) == (0, 500, 500)
    assert credit.balance_after_fen == 1_000 - 2_500 + 2_000
    assert wallet_drifts() == [] and unbalanced_transactions() == []


def test_usage_in_arrears_records_what_is_owed_after_it(user):
    wallet = _wallet(user)
    _chargeback(wallet, 4_000)  # no cash: all of it owed, the trial credit stays

    with transaction.atomic():
        # an offering whose trial price is its price
        accrued = usage_accrue_many([Accrual(wallet.id, 300, 300)])
        usage_settle_many(
            [Settlement(wallet.id, "usage:ins_1:1:1-1", "ins_1", "GPU usage", 1, 1, 0, 300)]
        )

    txn = LedgerTransaction.objects.get(idempotency_key="usage:ins_1:1:1-1:trial")
    assert accrued == [Accrued(0, 300, short=False, trial=True)]
    assert (txn.promo_after_fen, txn.arrears_after_fen, txn.balance_after_fen) == (
        700,
        4_000,
        -3_300,
    )
    assert wallet_drifts() == []


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE billing_wallet SET arrears_fen = -1",
        "UPDATE billing_wallet SET arrears_fen = 1, cash_fen = 1",
    ],
)
def test_the_database_refuses_negative_arrears_and_arrears_next_to_cash(user, statement):
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)

    assert _wallet(user).arrears_fen == 0


def test_the_audit_names_a_wallet_whose_arrears_drift(db, capsys):
    user = make_user()
    wallet = _wallet(user)
    _chargeback(wallet, 1_000)
    call_command("billing_audit")

    with connection.cursor() as cursor:
        cursor.execute("UPDATE billing_wallet SET arrears_fen = 1 WHERE id = %s", [wallet.id])
    with pytest.raises(CommandError, match="1 wallet"):
        call_command("billing_audit")

    err = capsys.readouterr().err
    assert f"DRIFT wallet={wallet.id}" in err and "arrears=¥0.01 ledger_arrears=¥10.00" in err
