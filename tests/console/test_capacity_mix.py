"""The operator overview's capacity mix (issue 28): per GPU model and region, the GPUs held now
by hourly, monthly and spot rentals and idle, and over the last 30 days the allocation rate,
the spot revenue and the preemptions, against what was seeded: an hourly and a monthly
instance with a known GPU-holding history, an instance in no-GPU mode (which holds none), and a
spot holding (Holding.billing "spot") with usage posted and a preemption (Holding.preempted_at)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.choices import TransactionKind
from billing.services import ledger_post
from compute.choices import HoldingKind
from compute.holdings import holding_new
from compute.models import Allocation, Holding, Offering
from console.overview import SPOT, capacity_mix
from fleet.models import Node
from instances.lifecycle import instance_order, instance_start
from instances.models import InstanceEvent
from instances.provisioning import converge
from starverse.core.text import later
from tests.factories import (
    converge_until,
    fund,
    make_instance,
    make_operator,
    make_user,
    staff_login,
)

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def _history(instance, since, *, gpus=None):
    """The instance's events replaced by one placement at `since` (in no-GPU mode: `gpus` 0)."""
    InstanceEvent.objects.filter(instance=instance).delete()
    params = {"node": instance.node.name, **({"gpus": gpus} if gpus is not None else {})}
    InstanceEvent.objects.create(
        instance=instance,
        status="running",
        at=since,
        message=later("Placed on %(node)s.") % params,
    )


@pytest.fixture
def seeded(catalog, settings):
    settings.MAX_RUNNING_GPUS = 64
    now = timezone.now()
    user = make_user()
    fund(user, catalog["h100_node"].price_per_month_fen + 100_000)
    hourly = make_instance(user, "running")  # 1× H100
    monthly, _ = instance_order(
        user=user, offering_id=catalog["h100_node"].id, image_id="pytorch-2.1", billing="monthly"
    )
    assert converge_until(converge.provision, monthly.id) == "running"
    monthly.refresh_from_db()
    no_gpu = make_instance(user, "stopped")
    instance_start(instance_id=no_gpu.id, gpus_attached=False)
    no_gpu.refresh_from_db()
    _history(hourly, now - timedelta(days=4))
    _history(monthly, now - timedelta(days=12))
    _history(no_gpu, now - timedelta(days=20), gpus=0)  # held no GPU all along

    a100 = Offering.objects.get(slug="a100-80g-x1")
    node = Node.objects.get(gpu_product=A100)
    spot, held = holding_new(
        holding_id="ins_spot0000000000000001",
        kind=HoldingKind.INSTANCE,
        tenant_id=user.tenant_id,
        created_by_id=user.id,
        offering=a100,
        billing=SPOT,
        placement=(node, [0]),
    )
    spot.save(force_insert=True)
    Allocation.objects.bulk_create(held)
    Holding.objects.filter(pk=spot.pk).update(preempted_at=now - timedelta(days=2))
    gone = Holding.objects.create(
        id="ins_spot0000000000000002",
        kind=HoldingKind.INSTANCE,
        tenant_id=user.tenant_id,
        created_by_id=user.id,
        offering=a100,
        billing=SPOT,
        state="released",
        region_id="default",
        preempted_at=now - timedelta(days=40),  # outside the window
    )
    for key, holding_id, fen in (("spot", spot.pk, 300), ("gone", gone.pk, 70)):
        ledger_post(
            wallet_id=user.tenant.wallet.id,
            key=f"usage:test:{key}",
            kind=TransactionKind.USAGE,
            amount_fen=-fen,
            instance_id=holding_id,
            description="GPU usage",
        )
    return now


def test_the_mix_matches_what_was_seeded(seeded):
    rows = {(row.product, row.region): row for row in capacity_mix(seeded)}

    h100 = rows[H100, "default"]
    assert (h100.total, h100.hourly, h100.monthly, h100.spot, h100.idle) == (16, 1, 8, 0, 7)
    # 8 GPUs × 12 days + 1 GPU × 4 days of 16 GPUs × 30 days; no-GPU mode's 20 days count none
    assert h100.allocation_pct == round(100 * (8 * 12 + 4) / (16 * 30), 1) == 20.8
    assert (h100.spot_revenue_fen, h100.preemptions) == (0, 0)

    a100 = rows[A100, "default"]
    assert (a100.total, a100.hourly, a100.monthly, a100.spot, a100.idle) == (8, 0, 0, 1, 7)
    assert (a100.spot_revenue_fen, a100.preemptions) == (370, 1)  # one preemption in 30 days
    assert all(product for product, _region in rows)  # CPU-only nodes have no row


def test_the_gpus_kept_from_spot_are_those_kept_for_the_next_paying_orders(seeded, settings):
    rows = {(row.product, row.region): row for row in capacity_mix(seeded)}
    assert rows[H100, "default"].kept_from_spot == 0  # no headroom: spot may take every GPU

    settings.SPOT_HEADROOM = 1
    rows = {(row.product, row.region): row for row in capacity_mix(seeded)}
    # H100: no node can be made whole (the monthly rental's node, and the hourly 1-GPU one
    # beside 7 free): 4 + 2 + 1 GPUs there; A100: its one node kept whole (the spot holding
    # on it would be taken back)
    assert rows[H100, "default"].kept_from_spot == 7
    assert rows[A100, "default"].kept_from_spot == 8


def test_the_page_shows_the_mix_to_an_operator(client, seeded):
    staff_login(client, make_operator())
    html = client.get("/admin/console/operatoroverview/").content.decode()

    assert f'data-product="{A100}" data-region="default"' in html
    assert 'data-held="spot">1<' in html and 'data-held="monthly">8<' in html
    assert "¥3.70" in html and "20.8%" in html
