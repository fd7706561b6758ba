"""starverse.core.locks: every advisory lock is taken there, from one enumeration of key spaces,
and a wallet is locked one way (billing.selectors.wallet_locked, wallets_locked)."""

import re
import threading

import pytest
from django.db import connection, connections, transaction

from billing.selectors import WalletBalance, wallet_locked, wallets_locked
from starverse.core.locks import (
    AdvisoryLock,
    gpu_model_placement_lock,
    node_claim,
    node_claim_first,
)
from tests.factories import make_user
from tests.product_code import ROOT, product_files


def _product_sources() -> dict[str, str]:
    return {str(path): (ROOT / path).read_text() for path in product_files()}


def test_advisory_locks_are_taken_only_in_the_locks_module():
    taking = sorted(p for p, text in _product_sources().items() if "pg_advisory" in text)
    assert taking == ["starverse/core/locks.py"]


def test_a_wallet_is_locked_only_by_the_billing_selectors():
    wallet_row_lock = re.compile(
        r"Wallet\.objects\.select_for_update|billing_wallet[^\"]*FOR UPDATE", re.S
    )
    locking = sorted(p for p, text in _product_sources().items() if wallet_row_lock.search(text))
    assert locking == ["billing/selectors.py"]


def test_key_spaces_are_distinct():
    assert len({int(space) for space in AdvisoryLock}) == len(AdvisoryLock)


def _in_another_connection(sql: str, params: list[str | int]) -> object:
    """Run `sql` on a connection of its own (a thread's) and return its one value, or the
    error it raised."""
    found: list[object] = []

    def run() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, params)
                found.append(cursor.fetchone()[0])
        except Exception as error:
            found.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=20)
    return found[0]


TRY = "SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))"
TRY_SHARED = "SELECT pg_try_advisory_xact_lock_shared(%s, hashtext(%s))"


@pytest.mark.django_db(transaction=True)
def test_the_placement_lock_excludes_others_and_its_shared_form_admits_shared():
    space = int(AdvisoryLock.GPU_MODEL_PLACEMENT)
    with transaction.atomic():
        gpu_model_placement_lock("h100")
        assert _in_another_connection(TRY_SHARED, [space, "h100"]) is False
        assert _in_another_connection(TRY, [space, "a100"]) is True  # another model is free
    with transaction.atomic():
        gpu_model_placement_lock("h100", shared=True)
        assert _in_another_connection(TRY_SHARED, [space, "h100"]) is True
        assert _in_another_connection(TRY, [space, "h100"]) is False
    assert _in_another_connection(TRY, [space, "h100"]) is True  # released at the end


@pytest.mark.django_db(transaction=True)
def test_a_node_claim_holds_until_the_transaction_ends_and_the_first_free_is_taken():
    space = int(AdvisoryLock.NODE_CLAIM)
    with transaction.atomic():
        node_claim("node_a")
        assert _in_another_connection(TRY, [space, "node_a"]) is False
        assert node_claim_first(["node_a", "node_b"]) == 0  # ours already
    held_elsewhere = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with transaction.atomic():
            node_claim("node_a")
            held_elsewhere.set()
            release.wait(timeout=20)
        connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held_elsewhere.wait(timeout=20)
        with transaction.atomic():
            assert node_claim_first(["node_a", "node_b"]) == 1
            assert _in_another_connection(TRY, [space, "node_b"]) is False
    finally:
        release.set()
        holder.join(timeout=20)


@pytest.mark.django_db(transaction=True)
def test_a_wallet_locked_by_tenant_or_by_id_is_the_same_row_lock():
    user = make_user()
    nowait = "SELECT id FROM billing_wallet WHERE id = %s FOR UPDATE NOWAIT"
    with transaction.atomic():
        wallet = wallet_locked(user.tenant_id)
        assert "could not obtain lock" in str(_in_another_connection(nowait, [wallet.pk]))
    with transaction.atomic():
        assert wallet_locked(wallet_id=wallet.pk).tenant_id == user.tenant_id
        assert "could not obtain lock" in str(_in_another_connection(nowait, [wallet.pk]))
    with transaction.atomic():
        assert wallets_locked([wallet.pk]) == {
            wallet.pk: WalletBalance(wallet.pk, 0, wallet.promo_fen, 0, 0, 0, wallet.postings)
        }
        assert "could not obtain lock" in str(_in_another_connection(nowait, [wallet.pk]))
    assert _in_another_connection(nowait, [wallet.pk]) == wallet.pk
    with pytest.raises(TypeError):
        wallet_locked()
