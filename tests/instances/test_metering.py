from datetime import timedelta

import pytest
from django.utils import timezone

from billing.models import LedgerTransaction, Wallet
from billing.services import Charged, minute_charge_fen, usage_post_many
from instances.metering import metering_tick
from instances.models import Instance
from instances.provisioning import converge
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


def test_ticks_charge_each_minute_exactly_once(catalog):
    user = make_user()
    fund(user, 100_000)
    instance = _running(catalog, user)  # ¥22.00 an hour
    start = instance.running_since

    metering_tick(now=start + timedelta(seconds=59))
    assert _usage(instance).count() == 0
    metering_tick(now=start + timedelta(minutes=3, seconds=5))
    metering_tick(now=start + timedelta(minutes=3, seconds=5))  # duplicate tick
    metering_tick(now=start + timedelta(minutes=2))  # a late tick from the past

    instance.refresh_from_db()
    assert _usage(instance).count() == 3
    assert instance.billed_minutes == 3
    assert instance.cost_fen == sum(minute_charge_fen(2200, m) for m in (1, 2, 3)) == 110
    keys = sorted(_usage(instance).values_list("idempotency_key", flat=True))
    assert keys == [f"usage:{instance.id}:1:{m}" for m in (1, 2, 3)]

    metering_tick(now=start + timedelta(minutes=60, seconds=1))  # catches up after an outage
    instance.refresh_from_db()
    assert instance.cost_fen == 2200
    assert Wallet.objects.get(tenant=user.tenant).total_fen == 101_000 - 2200


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


def test_usage_batch_replays_are_not_charged_twice(db):
    user = make_user()
    wallet = Wallet.objects.get(tenant=user.tenant)
    charges = [
        {
            "wallet_id": wallet.id,
            "key": f"usage:x:1:{m}",
            "amount_fen": 30,
            "trial_amount_fen": 30,
            "instance_id": "ins_x",
            "description": "GPU usage",
        }
        for m in range(1, 4)
    ]

    first = usage_post_many(charges)
    again = usage_post_many(charges)

    assert first == again == {f"usage:x:1:{m}": Charged(30, short=False) for m in range(1, 4)}
    wallet.refresh_from_db()
    assert wallet.total_fen == 910
    assert LedgerTransaction.objects.filter(kind="usage").count() == 3


def test_stopped_and_failed_instances_are_not_billed(catalog):
    user = make_user()
    fund(user, 100_000)
    instance = _running(catalog, user)
    Instance.objects.filter(pk=instance.pk).update(status="stopped", running_since=None)

    metering_tick(now=timezone.now() + timedelta(minutes=10))

    assert _usage(instance).count() == 0
