"""The meter under concurrency, on real PostgreSQL connections: ticks that run at once (a slow
worker overlapping the next minute's, or two beat schedulers by mistake) accrue each minute of
each holding once, since a tick locks the holdings it meters and skips the ones another holds;
and a stop's close waits for the tick that holds its holding, then adds nothing twice."""

import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from billing.models import LedgerTransaction, Wallet
from billing.selectors import wallet_drifts
from billing.services import minute_charge_fen
from compute import metering
from compute.choices import HoldingKind
from compute.holdings import holding_release
from compute.metering import meter_close, meter_open, meter_tick
from compute.models import Holding, Offering
from compute.selectors import pending_drifts
from instances.models import Instance
from tests.conftest import run_threads
from tests.factories import fund, holding_save, make_user


def _metering(count: int, since) -> tuple[Wallet, list[str], int]:
    call_command("seed_catalog", verbosity=0)
    user = make_user()
    fund(user, 1_000_000)
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    ids = []
    with transaction.atomic():
        for _ in range(count):
            instance = Instance.objects.create(
                tenant_id=user.tenant_id,
                created_by=user,
                offering=offering,
                image_id="pytorch-2.1",
                status="running",
                session=1,
                running_since=since,
            )
            holding_save(instance, waiting=False)
            meter_open(instance.id, key=f"usage:{instance.id}:1", since=since)
            ids.append(instance.id)
    return Wallet.objects.get(tenant=user.tenant), ids, offering.price_per_hour_fen


@pytest.mark.django_db(transaction=True)
def test_ticks_at_once_accrue_each_minute_once():
    now = timezone.now()
    wallet, ids, price = _metering(6, now - timedelta(minutes=5, seconds=1))

    results = run_threads(3, lambda _i: meter_tick(now=now))

    assert not [r for r in results if isinstance(r, Exception)]
    assert sum(r.minutes for r in results) == 6 * 5
    assert set(Holding.objects.filter(pk__in=ids).values_list("metered_minutes", flat=True)) == {5}
    wallet.refresh_from_db()
    assert wallet.pending_cash_fen == 6 * sum(minute_charge_fen(price, m) for m in range(1, 6))
    assert pending_drifts() == [] and wallet_drifts() == []


@pytest.mark.django_db(transaction=True)
def test_a_close_racing_a_tick_posts_each_minute_once():
    now = timezone.now()
    since = now - timedelta(minutes=61, seconds=1)
    _wallet, ids, price = _metering(4, since)

    def work(index: int) -> object:
        if index == 0:
            return meter_tick(now=now)
        with transaction.atomic():
            return meter_close(ids[index - 1], now=now, started_minute=False)

    results = run_threads(3, work)

    assert not [r for r in results if isinstance(r, Exception)]
    posted = LedgerTransaction.objects.filter(kind="usage", instance_id__in=ids)
    # each holding's 61 minutes posted once: an hour (and a minute) whoever got there first
    for instance_id in ids:
        mine = posted.filter(instance_id=instance_id)
        assert sum(mine.values_list("minutes", flat=True)) in (60, 61)
        assert -sum(mine.values_list("amount_fen", flat=True)) == sum(
            minute_charge_fen(price, m)
            for m in range(1, 1 + sum(mine.values_list("minutes", flat=True)))
        )
    held = Holding.objects.filter(pk__in=ids)
    assert all(
        h.pending_minutes + sum(posted.filter(instance_id=h.pk).values_list("minutes", flat=True))
        == 61
        for h in held
    )
    assert pending_drifts() == [] and wallet_drifts() == []


@pytest.mark.django_db(transaction=True)
def test_a_stop_holding_its_instance_while_a_tick_runs_does_not_deadlock(monkeypatch):
    """A stop locks its instance, then closes the session on its holding; the tick holds the
    holdings and the wallets and then adds the minutes to the instances' cost. Were the cost
    written while the tick still held the holdings, the two would wait for each other."""
    now = timezone.now()
    _wallet, ids, price = _metering(1, now - timedelta(minutes=3, seconds=1))
    hooks = metering._hooks[HoldingKind.INSTANCE]
    cost_writing = threading.Event()

    def accrued(fen: dict[str, int]) -> None:
        cost_writing.set()
        time.sleep(0.5)  # the stop below asks for the holding meanwhile
        hooks.accrued(fen)

    monkeypatch.setitem(metering._hooks, HoldingKind.INSTANCE, hooks._replace(accrued=accrued))

    def work(index: int) -> object:
        if index == 0:
            return meter_tick(now=now)
        with transaction.atomic():
            Instance.objects.select_for_update().get(pk=ids[0])  # the stop's lock on its row
            assert cost_writing.wait(timeout=10)
            return meter_close(ids[0], now=now, started_minute=False)

    results = run_threads(2, work)

    assert not [r for r in results if isinstance(r, Exception)], results
    [posting] = LedgerTransaction.objects.filter(kind="usage", instance_id=ids[0])
    assert posting.minutes == 3
    cost = sum(minute_charge_fen(price, m) for m in range(1, 4))
    assert Instance.objects.get(pk=ids[0]).cost_fen == cost == -posting.amount_fen
    assert pending_drifts() == [] and wallet_drifts() == []


@pytest.mark.django_db(transaction=True)
def test_a_holding_that_lets_its_gpus_go_meters_no_more():
    """Whatever path releases a holding's GPUs ends its metering: its closed minutes are
    posted and no later tick bills it (a product that forgot to close it is not billed on)."""
    now = timezone.now()
    _wallet, ids, price = _metering(1, now - timedelta(minutes=2, seconds=30))

    with transaction.atomic():
        holding_release(ids[0])
    meter_tick(now=now + timedelta(hours=2))

    [posting] = LedgerTransaction.objects.filter(kind="usage", instance_id=ids[0])
    assert posting.minutes == 2
    assert -posting.amount_fen == sum(minute_charge_fen(price, m) for m in (1, 2))
    assert Holding.objects.get(pk=ids[0]).metered_since is None
    assert pending_drifts() == [] and wallet_drifts() == []
