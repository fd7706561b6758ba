"""The meter's usage in the ledger: minutes held against the wallet as pending money
(usage_accrue_many) and posted by the hour (usage_settle_many, written by COPY, not through
model objects). They keep the ledger's rules: trial credit at the trial price while it covers
the minute, else cash at the standard price, what is left when short, the balances after each
row, arrears untouched and recorded, entries that sum to zero, balances equal to the ledger,
and what is free of the pending money is what every other debit sees."""

import re

import pytest
from django.db import transaction
from django.db.models import Sum

from billing.choices import TransactionKind
from billing.models import LedgerEntry, LedgerTransaction, Wallet
from billing.selectors import wallet_drifts
from billing.services import (
    Accrual,
    Accrued,
    Settlement,
    arrears_debit_post,
    ledger_post,
    usage_accrue_many,
    usage_settle_many,
)
from starverse.core.errors import IdempotencyConflict, InsufficientBalance
from starverse.core.ids import new_ids
from tests.factories import fund, make_user


def _settle(wallet, accrued, key="usage:ins_t:1:1-3", description="GPU usage"):
    trial = [a for a in accrued if a.trial]
    return Settlement(
        wallet_id=wallet.id,
        key=key,
        resource_id="ins_t",
        description=description,
        minutes=len(accrued),
        trial_minutes=len(trial),
        cash_fen=sum(a.cash_fen for a in accrued),
        promo_fen=sum(a.promo_fen for a in accrued),
    )


def test_minutes_spend_trial_credit_at_the_trial_price_then_cash_at_the_standard_price(db):
    user = make_user()  # ¥10 trial: 1000 fen promo
    fund(user, 500)
    wallet = Wallet.objects.get(tenant=user.tenant)

    with transaction.atomic():
        accrued = usage_accrue_many([Accrual(wallet.id, 700, 600) for _ in range(3)])

    # the trial credit covers the first minute at its trial price, not the second (400 < 600):
    # that one is cash at the standard price, short, and so is the third
    assert accrued == [
        Accrued(0, 600, short=False, trial=True),
        Accrued(500, 0, short=True),
        Accrued(0, 0, short=True),
    ]
    wallet.refresh_from_db()
    # held, not posted: the balance is the ledger's, what is free is what is left
    assert (wallet.promo_fen, wallet.cash_fen) == (1000, 500)
    assert (wallet.pending_promo_fen, wallet.pending_cash_fen, wallet.total_fen) == (600, 500, 400)
    assert not LedgerTransaction.objects.filter(kind="usage").exists()

    with transaction.atomic():
        assert usage_settle_many([_settle(wallet, accrued)]) == 2

    rows = LedgerTransaction.objects.filter(kind="usage").order_by("idempotency_key")
    assert [
        (t.idempotency_key, t.promo_delta_fen, t.cash_delta_fen, t.price_kind, t.minutes)
        for t in rows
    ] == [
        ("usage:ins_t:1:1-3", 0, -500, "standard", 2),
        ("usage:ins_t:1:1-3:trial", -600, 0, "trial", 1),
    ]
    for txn in rows:
        assert re.fullmatch(r"txn_[A-Za-z0-9]{20}", txn.id)
        legs = LedgerEntry.objects.filter(transaction=txn).aggregate(s=Sum("amount_fen"))["s"]
        assert legs == 0
    wallet.refresh_from_db()
    assert (wallet.promo_fen, wallet.cash_fen, wallet.pending_fen, wallet.total_fen) == (
        400,
        0,
        0,
        400,
    )
    assert not wallet_drifts()
    # a replay posts nothing again and holds nothing more
    with transaction.atomic():
        assert usage_settle_many([_settle(wallet, accrued)]) == 0
    wallet.refresh_from_db()
    assert (wallet.promo_fen, wallet.cash_fen, wallet.pending_fen) == (400, 0, 0)
    assert LedgerTransaction.objects.filter(kind="usage").count() == 2


def test_a_minute_without_a_trial_price_never_spends_trial_credit(db):
    user = make_user()  # 1000 fen promo, no cash
    wallet = Wallet.objects.get(tenant=user.tenant)

    with transaction.atomic():
        accrued = usage_accrue_many([Accrual(wallet.id, 10, None)])
        usage_settle_many([_settle(wallet, accrued, key="usage:ins_t:1:1-1")])

    assert accrued == [Accrued(0, 0, short=True)]
    txn = LedgerTransaction.objects.get(kind="usage")
    assert (txn.promo_delta_fen, txn.cash_delta_fen, txn.price_kind, txn.minutes) == (
        0,
        0,
        "standard",
        1,
    )
    wallet.refresh_from_db()
    assert (wallet.promo_fen, wallet.cash_fen) == (1000, 0)


def test_held_money_is_not_free_for_any_other_debit(db):
    user = make_user()
    fund(user, 1_000)  # cash 1000, promo 1000
    wallet = Wallet.objects.get(tenant=user.tenant)
    with transaction.atomic():
        usage_accrue_many([Accrual(wallet.id, 300, None) for _ in range(3)])

    with pytest.raises(InsufficientBalance):
        ledger_post(
            wallet_id=wallet.id,
            key="adj:too-much",
            kind=TransactionKind.ADJUSTMENT,
            amount_fen=-200,
            description="Adjustment",
        )
    taken = ledger_post(
        wallet_id=wallet.id,
        key="adj:what-is-free",
        kind=TransactionKind.ADJUSTMENT,
        amount_fen=-200,
        description="Adjustment",
        allow_partial=True,
    )

    assert taken.cash_delta_fen == -100  # 1000 cash, 900 of it held
    wallet.refresh_from_db()
    assert (wallet.cash_fen, wallet.pending_cash_fen, wallet.cash_free_fen) == (900, 900, 0)
    assert not wallet_drifts()


def test_a_posting_records_the_arrears_it_leaves_as_they_are(db):
    user = make_user()  # 1000 fen promo, no cash
    wallet = Wallet.objects.get(tenant=user.tenant)
    arrears_debit_post(
        wallet_id=wallet.id,
        key="cb:1",
        kind=TransactionKind.CHARGEBACK,
        amount_fen=300,
        description="Chargeback",
        reason="test",
    )

    with transaction.atomic():
        accrued = usage_accrue_many([Accrual(wallet.id, 200, 200)])
        usage_settle_many([_settle(wallet, accrued, key="usage:ins_t:1:1-1")])

    txn = LedgerTransaction.objects.get(kind="usage")
    assert (txn.promo_after_fen, txn.cash_after_fen, txn.arrears_after_fen) == (800, 0, 300)
    wallet.refresh_from_db()
    assert (wallet.promo_fen, wallet.arrears_fen) == (800, 300)
    assert not wallet_drifts()


def test_text_with_tabs_newlines_and_backslashes_is_stored_as_given(db):
    user = make_user()
    fund(user, 100)
    wallet = Wallet.objects.get(tenant=user.tenant)
    description = "GPU\tusage\\n\nline two\r\\N"

    with transaction.atomic():
        accrued = usage_accrue_many([Accrual(wallet.id, 10, None)])
        usage_settle_many([_settle(wallet, accrued, key="usage:t:1:1-1", description=description)])

    assert LedgerTransaction.objects.get(kind="usage").description == description


def test_the_same_key_with_other_amounts_is_a_conflict(db):
    user = make_user()
    fund(user, 100)
    wallet = Wallet.objects.get(tenant=user.tenant)
    with transaction.atomic():
        accrued = usage_accrue_many([Accrual(wallet.id, 10, None)])
        usage_settle_many([_settle(wallet, accrued, key="usage:ins_t:1:1-1")])

    with pytest.raises(IdempotencyConflict), transaction.atomic():
        usage_settle_many([_settle(wallet, [Accrued(20, 0, short=False)], key="usage:ins_t:1:1-1")])

    assert LedgerTransaction.objects.filter(kind="usage").count() == 1


def test_batch_ids_are_well_formed_and_distinct():
    ids = new_ids("txn", 5000)

    assert len(set(ids)) == 5000
    assert all(re.fullmatch(r"txn_[A-Za-z0-9]{20}", i) for i in ids)
