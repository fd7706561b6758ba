"""Each operator money view needs its own permission (superusers hold them all); bank transfers
and reversals above the approval threshold wait for a second operator like adjustments; and a
per-operator daily cap stops one large posting being split into many small ones."""

import pytest
from django.contrib.auth.models import Permission

from billing.models import AdjustmentRequest, LedgerTransaction, TopUp, Wallet
from tests.factories import make_operator, make_user, staff_login


def _staff(*codenames):
    user = make_user()
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="billing", codename__in=codenames)
    )
    return user


def _wallet():
    return Wallet.objects.get(tenant=make_user().tenant)


def _approve(client, request_id):
    return client.post(
        "/admin/billing/adjustmentrequest/",
        {"action": "approve", "_selected_action": [request_id]},
        follow=True,
    )


@pytest.mark.django_db
def test_each_money_view_needs_its_own_permission(client):
    wallet = _wallet()
    trial = LedgerTransaction.objects.get(wallet=wallet)
    staff_login(client, _staff("post_adjustment"))
    views = {
        "adjust": f"/admin/billing/wallet/{wallet.id}/adjust/",
        "bank": f"/admin/billing/wallet/{wallet.id}/bank-transfer/",
        "reverse": f"/admin/billing/ledgertransaction/{trial.id}/reverse/",
        "refund": "/admin/billing/topup/top_missing/refund/",
    }

    pages = {name: client.get(url).status_code for name, url in views.items()}
    posted = client.post(views["adjust"], {"amount": "20", "reason": "SLA"})
    bank = client.post(
        views["bank"], {"amount": "5", "payer": "P", "reference": "R-1", "reason": "x"}
    )
    reverse = client.post(views["reverse"], {"reason": "x"})

    assert pages == {"adjust": 200, "bank": 403, "reverse": 403, "refund": 403}
    assert posted.status_code == 302
    assert (bank.status_code, reverse.status_code) == (403, 403)
    wallet.refresh_from_db()
    assert wallet.cash_fen == 2_000
    assert not TopUp.objects.exists()
    assert not LedgerTransaction.objects.filter(kind="reversal").exists()


@pytest.mark.django_db
def test_a_staff_user_with_the_other_permissions_reaches_those_views(client):
    wallet = _wallet()
    staff_login(client, _staff("post_bank_transfer", "reverse_transaction", "refund_topup"))

    adjust = client.get(f"/admin/billing/wallet/{wallet.id}/adjust/")
    bank = client.post(
        f"/admin/billing/wallet/{wallet.id}/bank-transfer/",
        {"amount": "5", "payer": "P", "reference": "R-1", "reason": "x"},
    )
    posted = LedgerTransaction.objects.get(kind="bank_transfer")
    reverse = client.post(
        f"/admin/billing/ledgertransaction/{posted.id}/reverse/", {"reason": "wrong wallet"}
    )

    assert (adjust.status_code, bank.status_code, reverse.status_code) == (403, 302, 302)
    wallet.refresh_from_db()
    assert wallet.cash_fen == 0


@pytest.mark.django_db
def test_large_bank_transfers_and_reversals_wait_for_a_second_operator(client, settings):
    settings.ADJUSTMENT_APPROVAL_THRESHOLD_FEN = 10_000
    settings.ADMIN_DAILY_CAP_FEN = 10**9
    wallet = _wallet()
    first = make_operator()
    staff_login(client, first)
    form = {"amount": "20,000", "payer": "清华大学", "reference": "BOC-1", "reason": "grant"}

    client.post(f"/admin/billing/wallet/{wallet.id}/bank-transfer/", form)
    again = client.post(f"/admin/billing/wallet/{wallet.id}/bank-transfer/", form)
    request = AdjustmentRequest.objects.get()
    wallet.refresh_from_db()
    assert (request.kind, request.amount_fen, wallet.cash_fen) == ("bank_transfer", 2_000_000, 0)
    assert "already posted" in again.content.decode()
    assert "second operator" in _approve(client, request.id).content.decode()

    # a second operator holding only the adjustment permission may not approve it
    limited = _staff("post_adjustment")
    staff_login(client, limited)
    _approve(client, request.id)
    request.refresh_from_db()
    assert request.status == "pending"

    staff_login(client, make_operator())
    _approve(client, request.id)
    request.refresh_from_db()
    wallet.refresh_from_db()
    assert (request.status, wallet.cash_fen) == ("approved", 2_000_000)
    transfer = request.ledger_transaction
    assert transfer is not None and transfer.kind == "bank_transfer"
    assert TopUp.objects.get().bank_reference == "BOC-1"

    staff_login(client, first)
    client.post(
        f"/admin/billing/ledgertransaction/{transfer.id}/reverse/",
        {"reason": "wrong wallet"},
    )
    reversal = AdjustmentRequest.objects.get(kind="reversal")
    wallet.refresh_from_db()
    assert (reversal.amount_fen, wallet.cash_fen) == (-2_000_000, 2_000_000)
    staff_login(client, make_operator())
    _approve(client, reversal.id)
    reversal.refresh_from_db()
    wallet.refresh_from_db()
    assert (reversal.status, wallet.cash_fen) == ("approved", 0)
    assert reversal.ledger_transaction is not None
    assert reversal.ledger_transaction.reverses_id == transfer.id


@pytest.mark.django_db
def test_the_daily_cap_stops_splitting_a_large_adjustment(client, settings):
    settings.ADJUSTMENT_APPROVAL_THRESHOLD_FEN = 10_000
    settings.ADMIN_DAILY_CAP_FEN = 15_000
    wallet = _wallet()
    staff_login(client, make_operator())
    url = f"/admin/billing/wallet/{wallet.id}/adjust/"

    one = client.post(url, {"amount": "100", "reason": "part 1"})
    two = client.post(url, {"amount": "-40", "reason": "part 2"})  # either sign counts
    three = client.post(url, {"amount": "20", "reason": "part 3"})

    assert (one.status_code, two.status_code, three.status_code) == (302, 302, 200)
    assert "daily cap" in three.content.decode()
    wallet.refresh_from_db()
    assert wallet.cash_fen == 6_000
    # another operator has a cap of their own
    staff_login(client, make_operator())
    assert client.post(url, {"amount": "20", "reason": "part 3"}).status_code == 302
