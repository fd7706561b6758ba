"""The price of an hour, by mode (GPUs attached or no-GPU mode) and then by billing, is one
table (compute.pricing): per-minute metering, the spend rate and an order's runway read it, and
agree for every (mode, billing) pair, with an offering's optional prices set or withdrawn."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from compute.choices import BillingMode
from compute.metering import _metering, meter_open
from compute.models import Holding, Offering
from compute.orders import Order
from compute.pricing import HOUR_PRICES, hour_price
from instances.models import Instance
from instances.selectors import spend_rows
from tests.factories import fund, holding_save, make_user

PRICES = {
    "price_per_hour_fen": 1000,
    "trial_price_per_hour_fen": 700,
    "spot_price_per_hour_fen": 400,
    "cpu_only_price_per_hour_fen": 10,
    "price_per_month_fen": 500_000,
}
WITHDRAWN = {**PRICES, "spot_price_per_hour_fen": None, "cpu_only_price_per_hour_fen": None}
H, M, S = BillingMode.HOURLY, BillingMode.MONTHLY, BillingMode.SPOT
# (GPUs attached, billing) -> (cash, trial credit) an hour, with every price set / some withdrawn
EXPECTED = {
    (True, H): ((1000, 700), (1000, 700)),
    (True, M): ((1000, 700), (1000, 700)),
    (True, S): ((400, None), (1000, None)),
    (False, H): ((10, 10), (1000, 700)),
    (False, M): ((10, 10), (1000, 700)),
    (False, S): ((10, 10), (1000, 700)),
}


@pytest.fixture
def running(db):
    call_command("seed_catalog", verbosity=0)
    user = make_user()
    fund(user, 1_000_000)
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    since = timezone.now() - timedelta(minutes=5)
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
    return user, instance


def _readings(user, instance, attached, billing):
    """What metering, the spend rate and an order's runway each say an hour costs."""
    Instance.objects.filter(pk=instance.pk).update(billing=billing)
    Holding.objects.filter(pk=instance.pk).update(billing=billing, gpus_attached=attached)
    with transaction.atomic():
        (metered,) = _metering(Q(pk=instance.pk), skip_locked=False)
    spend = {tenant: (cash, trial) for tenant, cash, trial in spend_rows([user.tenant_id])}
    offering = Offering.objects.get(pk=instance.offering_id)
    order = Order(
        product="instance",
        tenant_id=user.tenant_id,
        created_by_id=user.pk,
        offering=offering,
        gpus=1,
        billing=billing,
        cpu_only=not attached,
    )
    return (metered.price, metered.trial_price), spend.get(user.tenant_id), order.own_fen


@pytest.mark.parametrize("variant", [0, 1], ids=["every price set", "spot and no-GPU withdrawn"])
def test_metering_the_spend_rate_and_the_runway_agree_for_every_mode_and_billing(running, variant):
    user, instance = running
    Offering.objects.filter(pk=instance.offering_id).update(**(PRICES, WITHDRAWN)[variant])
    offering = Offering.objects.get(pk=instance.offering_id)
    assert set(HOUR_PRICES) == set(EXPECTED)
    for (attached, billing), expected in EXPECTED.items():
        cash, trial = expected[variant]
        table = (
            hour_price(offering, billing=billing, gpus_attached=attached),
            hour_price(offering, billing=billing, gpus_attached=attached, trial=True),
        )
        metered, spent, own = _readings(user, instance, attached, billing)
        assert table == (cash, trial), (attached, billing)
        assert metered == (cash, trial), (attached, billing)
        if billing == M:
            assert spent is None  # prepaid: a monthly rental burns nothing by the hour
        else:
            assert spent == (cash, trial), (attached, billing)
        # a monthly order's runway is its month, prepaid; every other an hour
        assert own == (offering.price_per_month_fen if (attached, billing) == (True, M) else cash)
