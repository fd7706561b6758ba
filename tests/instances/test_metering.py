from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from billing.models import LedgerTransaction, Wallet
from billing.selectors import wallet_drifts
from billing.services import minute_charge_fen
from compute.metering import meter_close, meter_tick
from compute.models import Holding
from instances.lifecycle import instance_stop
from instances.metering import metering_tick
from instances.models import Instance
from instances.provisioning import converge
from starverse.core.db import bulk_insert
from tests.factories import converge_until, fund, make_user


@pytest.mark.parametrize("price", [1, 999, 2200, 16000, 12345])
def test_an_hour_costs_exactly_the_hourly_price(price):
    charges = [minute_charge_fen(price, m) for m in range(1, 121)]

    assert sum(charges[:60]) == price
    assert sum(charges) == 2 * price
    assert max(charges) - min(charges) <= 1


def _running(catalog, user, offering="h100x1"):
    from instances.lifecycle import instance_order

    instance, _ = instance_order(
        user=user, offering_id=catalog[offering].id, image_id="pytorch-2.1"
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    return instance


def _usage(instance):
    return LedgerTransaction.objects.filter(instance_id=instance.id, kind="usage")


def _holding(instance):
    return Holding.objects.get(pk=instance.id)


def test_minutes_accrue_each_minute_exactly_once_and_post_by_the_hour(catalog):
    user = make_user()
    fund(user, 100_000)
    instance = _running(catalog, user)  # ¥22.00 an hour
    start = instance.running_since
    wallet = Wallet.objects.get(tenant=user.tenant)
    free = wallet.total_fen

    metering_tick(now=start + timedelta(seconds=59))
    assert _holding(instance).metered_minutes == 0
    metering_tick(now=start + timedelta(minutes=3, seconds=5))
    metering_tick(now=start + timedelta(minutes=3, seconds=5))  # duplicate tick
    metering_tick(now=start + timedelta(minutes=2))  # a late tick from the past

    instance.refresh_from_db()
    held = _holding(instance)
    spent = sum(minute_charge_fen(2200, m) for m in (1, 2, 3))
    assert (held.metered_minutes, held.pending_minutes, held.pending_cash_fen) == (3, 3, spent)
    assert instance.cost_fen == spent == 110
    # accrued, held against the balance, not yet in the ledger
    assert _usage(instance).count() == 0
    wallet.refresh_from_db()
    assert (wallet.total_fen, wallet.pending_fen) == (free - 110, 110)

    metering_tick(now=start + timedelta(minutes=60, seconds=1))  # catches up: an hour
    instance.refresh_from_db()
    assert instance.cost_fen == 2200
    [posting] = _usage(instance)
    assert (posting.idempotency_key, posting.amount_fen, posting.minutes) == (
        f"usage:{instance.id}:1:1-60",
        -2200,
        60,
    )
    wallet.refresh_from_db()
    assert (wallet.total_fen, wallet.pending_fen) == (101_000 - 2200, 0)
    assert not wallet_drifts()

    # stopped after 61 minutes and a half: the rest of the session posts at once
    stopping = start + timedelta(minutes=61, seconds=30)
    with transaction.atomic():
        spent = meter_close(instance.id, now=stopping)
    assert spent == minute_charge_fen(2200, 61) + minute_charge_fen(2200, 62)
    assert sorted(_usage(instance).values_list("idempotency_key", "minutes")) == [
        (f"usage:{instance.id}:1:1-60", 60),
        (f"usage:{instance.id}:1:61-62", 2),
    ]
    assert _holding(instance).metered_since is None


def test_a_ledger_of_hours_not_minutes(catalog):
    user = make_user()
    fund(user, 1_000_000)
    instance = _running(catalog, user)
    start = instance.running_since

    for minute in range(1, 181):  # three hours, a tick a minute
        meter_tick(now=start + timedelta(minutes=minute, seconds=1))

    assert _usage(instance).count() == 3
    assert _usage(instance).aggregate(m=Sum("minutes"))["m"] == 180
    assert -_usage(instance).aggregate(f=Sum("amount_fen"))["f"] == 3 * 2200


def test_a_crash_between_accrual_and_posting_loses_and_doubles_nothing(catalog, monkeypatch):
    user = make_user()
    fund(user, 100_000)
    instance = _running(catalog, user)
    start = instance.running_since
    metering_tick(now=start + timedelta(minutes=59, seconds=1))  # 59 minutes accrued

    def crash(table, columns, rows):
        raise ConnectionError("the worker died while posting")

    # the tick that reaches the hour dies inside its posting: nothing of it holds
    monkeypatch.setattr("billing.services.bulk_insert", crash)
    with pytest.raises(ConnectionError):
        meter_tick(now=start + timedelta(minutes=60, seconds=1))
    held = _holding(instance)
    assert (held.metered_minutes, held.pending_minutes) == (59, 59)
    assert _usage(instance).count() == 0

    # the next tick (late) does both, once
    monkeypatch.setattr("billing.services.bulk_insert", bulk_insert)
    meter_tick(now=start + timedelta(minutes=60, seconds=40))
    meter_tick(now=start + timedelta(minutes=60, seconds=50))
    [posting] = _usage(instance)
    assert (posting.minutes, posting.amount_fen) == (60, -2200)
    wallet = Wallet.objects.get(tenant=user.tenant)
    assert (wallet.pending_fen, wallet.total_fen) == (0, 101_000 - 2200)
    instance.refresh_from_db()
    assert instance.cost_fen == 2200
    assert not wallet_drifts()


def test_exhausted_balance_takes_what_is_left_and_stops_within_one_tick(catalog):
    user = make_user()
    fund(user, 500)  # ¥15 with the trial credit: under an hour of ¥22
    from compute.models import Offering
    from instances.lifecycle import instance_order

    offering = Offering.objects.get(name="1× RTX 4090 24GB")  # ¥2.20 an hour: runway is fine
    instance, _ = instance_order(user=user, offering_id=offering.id, image_id="pytorch-2.1")
    converge_until(converge.provision, instance.id)
    instance.refresh_from_db()
    Wallet.objects.filter(tenant=user.tenant).update(cash_fen=5, promo_fen=0)  # audit-breaking

    assert instance.running_since is not None
    result = metering_tick(now=instance.running_since + timedelta(minutes=3, seconds=1))

    instance.refresh_from_db()
    assert result.exhausted == [instance.id]
    assert instance.status == "stopping"
    assert instance.cost_fen == 5
    assert Wallet.objects.get(tenant=user.tenant).total_fen == 0
    last = instance.events.last()
    assert last is not None and "Balance exhausted" in last.message
    # the stop posted what the minutes took
    assert -_usage(instance).aggregate(f=Sum("amount_fen"))["f"] == 5
    assert Wallet.objects.get(tenant=user.tenant).pending_fen == 0


def test_stopped_instances_are_not_billed(catalog):
    user = make_user()
    fund(user, 100_000)
    instance = _running(catalog, user)
    instance_stop(instance_id=instance.id)
    posted = _usage(instance).count()

    metering_tick(now=timezone.now() + timedelta(minutes=10))

    assert _holding(instance).metered_since is None
    assert _usage(instance).count() == posted
    instance.refresh_from_db()
    assert Instance.objects.get(pk=instance.pk).cost_fen == instance.cost_fen


def test_the_meter_audit_names_a_wallet_whose_pending_usage_drifts(catalog, capsys):
    user = make_user()
    fund(user, 100_000)
    instance = _running(catalog, user)
    metering_tick(now=instance.running_since + timedelta(minutes=5, seconds=1))
    call_command("meter_audit")
    assert "OK" in capsys.readouterr().out

    Wallet.objects.filter(tenant=user.tenant).update(pending_cash_fen=1)  # a hand edit
    with pytest.raises(CommandError, match="1 wallet"):
        call_command("meter_audit")

    wallet = Wallet.objects.get(tenant=user.tenant)
    assert f"PENDING_DRIFT wallet={wallet.id} pending_cash=¥0.01" in capsys.readouterr().err
