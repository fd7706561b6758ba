from billing.choices import RunwayLevel, TransactionKind
from billing.models import RunwayNotice, Wallet
from billing.notices import runway_level, runway_notices_check
from billing.services import ledger_post
from events.models import Event
from tests.factories import make_user


def _post(wallet, key, kind, fen):
    return ledger_post(wallet_id=wallet.id, key=key, kind=kind, amount_fen=fen, description="t")


def _minutes_told(user):
    """The runways the balance.low events reported, oldest first (the channels mail them)."""
    told = Event.objects.filter(tenant_id=user.tenant_id, type="balance.low")
    return [
        data["runway_minutes"]
        for data in told.order_by("created_at").values_list("data", flat=True)
    ]


def test_runway_levels():
    assert runway_level(6_000, 0) == RunwayLevel.OK
    assert runway_level(6_000, 6_000) == RunwayLevel.OK  # exactly one hour
    assert runway_level(5_999, 6_000) == RunwayLevel.BELOW_HOUR
    assert runway_level(1_000, 6_000) == RunwayLevel.BELOW_HOUR  # exactly ten minutes
    assert runway_level(999, 6_000) == RunwayLevel.BELOW_TEN_MINUTES


def test_runway_notices_are_sent_once_per_crossing(db):
    user = make_user(verified=False)  # no trial credit: usage here is paid from cash
    wallet = Wallet.objects.get(tenant=user.tenant)
    spend = {user.tenant_id: 6_000}  # running instances burning ¥60/h
    _post(wallet, "topup:a", TransactionKind.TOPUP, 6_000)
    _post(wallet, "usage:a:1", TransactionKind.USAGE, -1_000)  # ¥50 left

    assert runway_notices_check(spend) == 1  # ¥50 at ¥60/h: 50 minutes
    assert runway_notices_check(spend) == 0
    assert _minutes_told(user) == [50]

    _post(wallet, "usage:a:2", TransactionKind.USAGE, -4_500)  # ¥5 left

    assert runway_notices_check(spend) == 1  # ¥5 left: five minutes
    assert runway_notices_check(spend) == 0
    assert RunwayNotice.objects.get(wallet=wallet).level == RunwayLevel.BELOW_TEN_MINUTES

    _post(wallet, "topup:b", TransactionKind.TOPUP, 100_000)  # a top-up ends the countdown

    assert runway_notices_check(spend) == 0
    assert RunwayNotice.objects.get(wallet=wallet).level == RunwayLevel.OK
    assert _minutes_told(user) == [50, 5]


def test_wallets_without_spend_get_no_notice(db):
    make_user()

    assert runway_notices_check({}) == 0
    assert RunwayNotice.objects.count() == 0
