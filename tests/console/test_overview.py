"""The operator overview in the admin: its numbers match the allocations, usage postings and
queued orders seeded (orders placed on the local cluster, their GPU-holding history set at
known hours), it is for operators with its permission only, and the queries it makes do not
grow with the fleet or the tenants."""

from collections import defaultdict
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.choices import TransactionKind
from billing.models import LedgerTransaction
from billing.services import ledger_post
from compute.models import Holding
from console.overview import HOURS, operator_overview
from fleet.models import Node
from instances.lifecycle import instance_order
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

H100 = "NVIDIA H100 80GB HBM3"
URL = "/admin/console/operatoroverview/"


@pytest.fixture
def now():
    """A fixed moment half past an hour, ten days back: what the overview is read as of."""
    return (timezone.now() - timedelta(days=10)).replace(minute=30, second=0, microsecond=0)


def _usage(monkeypatch, user, fen, at, key):
    """A usage charge posted through the ledger as if at `at` (ledger rows cannot be edited
    afterwards, so the clock their creation reads is set)."""
    field = LedgerTransaction._meta.get_field("created_at")
    monkeypatch.setattr(field, "_get_default", lambda: at)
    ledger_post(
        wallet_id=user.tenant.wallet.id,
        key=f"usage:test:{key}",
        kind=TransactionKind.USAGE,
        amount_fen=-fen,
        description="GPU usage",
    )
    monkeypatch.undo()


def _history(instance, *steps):
    """The instance's events replaced by `steps` of (status, at): its GPU-holding history."""
    InstanceEvent.objects.filter(instance=instance).delete()
    for status, at in steps:
        message = later("Placed on %(node)s.") % {"node": instance.node.name}
        InstanceEvent.objects.create(
            instance=instance,
            status=status,
            at=at,
            message=message if status == "provisioning" else "x",
        )


@pytest.fixture
def seeded(catalog, monkeypatch, now, settings):
    """A 1× H100 instance that held its GPU from 3 h 30 min before `now` to 1 h 15 min before;
    a whole H100 node running for tenant `big`; two whole-node orders queued; usage posted on
    two days."""
    settings.MAX_RUNNING_GPUS = 64
    hour = now.replace(minute=0)
    small_user, big = make_user(), make_user()
    fund(small_user, 100_000)
    fund(big, 10_000_000)
    small = make_instance(small_user)
    _history(
        small,
        ("queued", hour - timedelta(hours=3, minutes=30)),
        ("provisioning", hour - timedelta(hours=3)),
        ("running", hour - timedelta(hours=2, minutes=30)),
        ("stopping", hour - timedelta(hours=1)),
        ("stopped", hour - timedelta(minutes=45)),
    )
    placed = [
        instance_order(user=big, offering_id=catalog["h100_node"].id, image_id="pytorch-2.1")[0]
        for _ in range(3)
    ]
    assert [i.status for i in placed] == ["provisioning", "queued", "queued"]
    assert converge_until(converge.provision, placed[0].id) == "running"
    Holding.objects.filter(pk=placed[1].pk).update(queued_at=now - timedelta(minutes=95))
    Holding.objects.filter(pk=placed[2].pk).update(queued_at=now - timedelta(minutes=20))
    # Each user's ¥10 trial pays the first ¥10 of its usage; the rest is cash.
    _usage(monkeypatch, small_user, 3_000, now - timedelta(days=2), "s1")
    _usage(monkeypatch, big, 50_000, now - timedelta(days=2, hours=1), "b1")
    _usage(monkeypatch, big, 7_000, now - timedelta(hours=1), "b2")
    _usage(monkeypatch, big, 99_000, now - timedelta(days=45), "old")
    return {"small": small, "small_user": small_user, "big": big, "hour": hour}


@pytest.mark.django_db
def test_the_numbers_match_what_was_seeded(seeded, now):
    data = operator_overview(now)

    assert len(data.hours) == HOURS and data.hours[-1] == seeded["hour"]
    h100 = next(m for m in data.models if m.product == H100)
    assert h100.total == 16
    # hours -3, -2 full (1 of 16 GPUs), hour -1 a quarter (stopping until 15 min past)
    assert h100.percent[-4:] == [round(100 / 16, 1), round(100 / 16, 1), round(25 / 16, 1), 0.0]
    assert h100.percent[:-4] == [0.0] * (HOURS - 4)
    node = next(n for n in data.nodes if n.name == seeded["small"].node.name)
    assert node.gpus[-4:] == [1.0, 1.0, 0.25, 0.0]
    assert sum(sum(n.gpus) for n in data.nodes) == 2.25

    expected: dict = defaultdict(lambda: {"revenue_fen": 0, "cash_fen": 0})
    # usage posted to the ledger is paid from cash only (trial credit pays trial-priced minutes)
    for at, fen, cash in [
        (now - timedelta(days=2), 3_000, 3_000),
        (now - timedelta(days=2, hours=1), 50_000, 50_000),
        (now - timedelta(hours=1), 7_000, 7_000),
    ]:
        expected[timezone.localtime(at).date()]["revenue_fen"] += fen
        expected[timezone.localtime(at).date()]["cash_fen"] += cash
    shown = {row["day"]: row for row in data.days if row["revenue_fen"]}
    assert shown == {day: {"day": day, **sums} for day, sums in expected.items()}
    assert data.revenue_fen == 60_000
    assert len(data.days) == 30

    assert [(t["id"], t["spent_fen"], t["running_gpus"]) for t in data.tenants] == [
        (seeded["big"].tenant_id, 57_000, 8),
        (seeded["small_user"].tenant_id, 3_000, 0),
    ]
    assert [(q["product"], q["orders"], q["gpus"], q["wait"]) for q in data.queue] == [
        (H100, 2, 16, timedelta(minutes=95))
    ]


@pytest.mark.django_db
def test_the_page_shows_them_to_an_operator(client, seeded, now, monkeypatch):
    operator = staff_login(client, make_operator())
    index = client.get("/admin/")
    monkeypatch.setattr(timezone, "now", lambda: now)

    page = client.get(URL)

    assert operator.has_perm("console.view_overview")
    assert URL in index.content.decode()
    assert page.status_code == 200
    html = page.content.decode()
    assert "¥600.00" in html  # revenue, 30 days
    assert f'data-tenant="{seeded["big"].tenant_id}"' in html
    assert "¥570.00" in html and "¥30.00" in html
    assert "1 h 35 min" in html
    assert html.count("<rect ") >= 3 + 30 * 2  # the node's three hours, two bars a day
    assert "6.2%" in html or "6.3%" in html  # the H100 peak hour


@pytest.mark.django_db
def test_only_operators_with_the_permission_see_it(client):
    user = make_user()
    client.force_login(user)
    outsider = client.get(URL)

    staff = make_user()
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    staff_login(client, staff)
    without = client.get(URL)
    index = client.get("/admin/").content.decode()
    staff.user_permissions.add(Permission.objects.get(codename="view_overview"))
    staff = type(staff).objects.get(pk=staff.pk)  # permissions are cached on the instance
    staff_login(client, staff)
    granted = client.get(URL)

    assert outsider.status_code == 302 and "login" in outsider["Location"]
    assert without.status_code == 403
    assert URL not in index
    assert granted.status_code == 200


def _queries(client):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(URL).status_code == 200
    return len(queries)


@pytest.mark.django_db
def test_queries_do_not_grow_with_nodes_or_tenants(client, seeded, now, monkeypatch):
    staff_login(client, make_operator())
    _queries(client)  # warm: caches filled once per process
    before = _queries(client)
    for n in range(12):
        Node.objects.create(
            name=f"gpu-extra-{n}", gpu_product=H100, gpu_count=8, gpu_memory_mb=81_559
        )
        user = make_user()
        fund(user, 10_000)
        _usage(monkeypatch, user, 100 + n, now - timedelta(days=1), f"x{n}")
    make_instance(make_user())

    after = _queries(client)

    assert after == before
    assert after <= 15
