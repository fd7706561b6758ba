"""The queue's one rule of who waits ahead (compute.queue), bound two ways: to an order's values
(waits_ahead, what a new order or a start asks) and to each holding's columns (positions, the
place in line shown). Both respect regions, passed-over orders and the order of arrival, and
agree with each other; a cluster's ranks are one order."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from compute.choices import HoldingKind
from compute.holdings import holding_new, holdings_unfunded
from compute.models import Offering
from compute.queue import positions, waits_ahead
from fleet.models import Region
from instances.models import Instance
from tests.factories import make_user

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def line(db, catalog):
    """Queued holdings of H100 offerings, a minute apart: north-1 (region cn-north), any-2 (any
    region), south-3 (cn-south), a cluster of two ranks (cn-north), north-5."""
    for name in ("cn-north", "cn-south"):
        Region.objects.get_or_create(name=name, defaults={"display_name": name})
    user = make_user()
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    start = timezone.now() - timedelta(hours=1)
    rows = [
        ("north-1", "cn-north", ""),
        ("any-2", None, ""),
        ("south-3", "cn-south", ""),
        ("rank-a", "cn-north", "clu_x"),
        ("rank-b", "cn-north", "clu_x"),
        ("north-5", "cn-north", ""),
    ]
    for index, (holding_id, region, gang) in enumerate(rows):
        at = start + timedelta(minutes=index if not gang else 3)
        holding, _held = holding_new(
            holding_id=holding_id,
            kind=HoldingKind.RANK if gang else HoldingKind.INSTANCE,
            tenant_id=user.tenant_id,
            created_by_id=user.pk,
            offering=offering,
            region_id=region,
            gang=gang,
            queued_at=at,
        )
        holding.save()
    return {holding_id: start + timedelta(minutes=i) for i, (holding_id, _r, _g) in enumerate(rows)}


def test_a_place_in_line_counts_only_the_orders_that_could_take_the_same_nodes(line):
    found = positions(["north-1", "any-2", "south-3", "rank-a", "rank-b", "north-5"])

    assert found == {
        "north-1": 1,
        "any-2": 2,  # any region: behind north-1
        "south-3": 2,  # behind any-2 only: north's orders never hold up the south
        "rank-a": 3,  # north-1 and any-2, not its own cluster's other rank
        "rank-b": 3,
        "north-5": 4,  # north-1, any-2 and the cluster, counted once
    }


def test_passed_over_orders_hold_up_no_one(line):
    holdings_unfunded(["north-1", "any-2"], since=timezone.now())

    assert positions(["south-3", "north-5"]) == {"south-3": 1, "north-5": 2}


def test_the_two_bindings_of_the_rule_agree(line):
    found = positions(list(line))
    regions = {
        "north-1": "cn-north",
        "any-2": "",
        "south-3": "cn-south",
        "rank-a": "cn-north",
        "rank-b": "cn-north",
        "north-5": "cn-north",
    }
    for holding_id, position in found.items():
        at = line["rank-a"] if holding_id.startswith("rank") else line[holding_id]
        assert waits_ahead(H100, regions[holding_id], before=at) == (position > 1), holding_id
    # a new order (not in line) waits behind anyone its region could take
    assert waits_ahead(H100, "cn-south") and waits_ahead(H100, "")
    assert not waits_ahead("NVIDIA A100-SXM4-80GB", "")


def test_every_instance_has_its_holding(transactional_db, catalog):
    """The database holds an instance row to a holding of its id (checked at commit)."""
    user = make_user()
    with pytest.raises(IntegrityError), transaction.atomic():
        Instance.objects.create(
            tenant_id=user.tenant_id,
            created_by=user,
            offering=Offering.objects.get(name="1× H100 80GB SXM"),
            image_id="pytorch-2.1",
        )
    assert not Instance.objects.exists()
