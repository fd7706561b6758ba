"""The metering tick's batched usage debits (written by COPY, not through model objects) keep
the ledger's rules: trial credit at the trial price while it covers the charge, else cash at
the standard price, what is left when short, the balances after each row,
arrears untouched and recorded, entries that sum to zero, balances equal to the ledger."""

import re

from django.db.models import Sum

from billing.choices import TransactionKind
from billing.models import LedgerEntry, LedgerTransaction, Wallet
from billing.selectors import wallet_drifts
from billing.services import Charged, arrears_debit_post, ledger_post, usage_post_many
from starverse.core.ids import new_ids
from tests.factories import fund, make_user


def _charge(wallet, n, fen, description="GPU usage", trial=None):
    return {
        "wallet_id": wallet.id,
        "key": f"usage:ins_t:1:{n}",
        "amount_fen": fen,
        "trial_amount_fen": trial,
        "instance_id": "ins_t",
        "description": description,
    }


def test_a_batch_spends_trial_credit_at_the_trial_price_then_cash_at_the_standard_price(db):
    user = make_user()  # ¥10 trial: 1000 fen promo
    fund(user, 500)
    wallet = Wallet.objects.get(tenant=user.tenant)

    charged = usage_post_many([_charge(wallet, n, 700, trial=600) for n in (1, 2, 3)])

    # the trial credit covers the first minute at its trial price, not the second (400 < 600):
    # that one is cash at the standard price, short, and so is the third
    assert charged == {
        "usage:ins_t:1:1": Charged(600, short=False),
        "usage:ins_t:1:2": Charged(500, short=True),
        "usage:ins_t:1:3": Charged(0, short=True),
    }
    rows = LedgerTransaction.objects.filter(kind="usage").order_by("idempotency_key")
    assert [(t.promo_delta_fen, t.cash_delta_fen, t.price_kind) for t in rows] == [
        (-600, 0, "trial"),
        (0, -500, "standard"),
        (0, 0, "standard"),
    ]
    assert [(t.promo_after_fen, t.cash_after_fen) for t in rows] == [(400, 500), (400, 0), (400, 0)]
    for txn in rows:
        assert re.fullmatch(r"txn_[A-Za-z0-9]{20}", txn.id)
        legs = LedgerEntry.objects.filter(transaction=txn).aggregate(s=Sum("amount_fen"))["s"]
        assert (legs or 0) == 0  # a charge that took nothing has no legs
    wallet.refresh_from_db()
    assert (wallet.promo_fen, wallet.cash_fen) == (400, 0)
    assert not wallet_drifts()
    # a replay answers what the first posting took, short or not
    assert usage_post_many([_charge(wallet, n, 700, trial=600) for n in (1, 2, 3)]) == charged


def test_a_charge_without_a_trial_price_never_spends_trial_credit(db):
    user = make_user()  # 1000 fen promo, no cash
    wallet = Wallet.objects.get(tenant=user.tenant)

    charged = usage_post_many([_charge(wallet, 1, 10)])

    assert charged == {"usage:ins_t:1:1": Charged(0, short=True)}
    txn = LedgerTransaction.objects.get(kind="usage")
    assert (txn.promo_delta_fen, txn.cash_delta_fen, txn.price_kind) == (0, 0, "standard")
    wallet.refresh_from_db()
    assert (wallet.promo_fen, wallet.cash_fen) == (1000, 0)


def test_a_batch_records_the_arrears_it_leaves_as_they_are(db):
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

    usage_post_many([_charge(wallet, 1, 200, trial=200)])

    txn = LedgerTransaction.objects.get(kind="usage")
    assert (txn.promo_after_fen, txn.cash_after_fen, txn.arrears_after_fen) == (800, 0, 300)
    wallet.refresh_from_db()
    assert (wallet.promo_fen, wallet.arrears_fen) == (800, 300)
    assert not wallet_drifts()


def test_text_with_tabs_newlines_and_backslashes_is_stored_as_given(db):
    user = make_user()
    wallet = Wallet.objects.get(tenant=user.tenant)
    description = "GPU\tusage\\n\nline two\r\\N"

    usage_post_many([_charge(wallet, 1, 10, description)])

    assert LedgerTransaction.objects.get(kind="usage").description == description


def test_a_ledger_post_replay_of_a_batched_key_is_the_same_request(db):
    """A batched debit carries the request hash ledger_post gives the same usage debit."""
    user = make_user()
    wallet = Wallet.objects.get(tenant=user.tenant)
    usage_post_many([_charge(wallet, 1, 10)])

    again = ledger_post(
        wallet_id=wallet.id,
        key="usage:ins_t:1:1",
        kind=TransactionKind.USAGE,
        amount_fen=-10,
        description="GPU usage",
        allow_partial=True,
        instance_id="ins_t",
    )

    assert again == LedgerTransaction.objects.get(kind="usage")
    assert LedgerTransaction.objects.filter(kind="usage").count() == 1


def test_batch_ids_are_well_formed_and_distinct():
    ids = new_ids("txn", 5000)

    assert len(set(ids)) == 5000
    assert all(re.fullmatch(r"txn_[A-Za-z0-9]{20}", i) for i in ids)
