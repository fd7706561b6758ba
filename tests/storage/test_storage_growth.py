"""Growing a disk or the NAS is charged at once for the rest of the day, and refused while the
tenant is in arrears (409) or when the balance cannot pay it (402), leaving size and balance as
they were. The clock is frozen at 09:00 Asia/Shanghai: 15 of the day's 24 hours are left."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from billing.models import LedgerTransaction
from billing.selectors import wallet_for_tenant
from storage.disks import disk_create, disk_resize
from storage.models import Disk, StorageArrears, StoragePrice
from storage.nas import nas_set_size
from tests.factories import fund, make_user

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))


@pytest.fixture
def frozen(monkeypatch, db):
    monkeypatch.setattr(timezone, "now", lambda: T0)
    StoragePrice.objects.create(kind="disk", price_per_gb_day_fen=1)
    StoragePrice.objects.create(kind="nas", price_per_gb_day_fen=2)


@pytest.fixture
def owner(frozen):
    user = make_user()
    fund(user, 2_000)  # + ¥10 trial = ¥30
    return user


def _balance(user):
    return wallet_for_tenant(user.tenant_id).total_fen


def test_growing_a_disk_charges_the_rest_of_the_day_at_once_and_once(owner):
    disk = disk_create(user=owner, name="ckpt", size_gb=100)
    before = _balance(owner)

    disk_resize(tenant_id=owner.tenant_id, disk_id=disk.id, size_gb=250)

    # 150 GB × 1 fen × 15/24 of the day = 93.75 → 94 fen, rounded up
    key = f"storage-grow:{disk.id}:{T0.date().isoformat()}:250"
    assert LedgerTransaction.objects.get(idempotency_key=key).amount_fen == -94
    assert _balance(owner) == before - 94
    disk_resize(tenant_id=owner.tenant_id, disk_id=disk.id, size_gb=250)  # same size: free
    assert _balance(owner) == before - 94


def test_growing_the_nas_charges_the_rest_of_the_day(owner):
    nas, _ = nas_set_size(user=owner, size_gb=50)
    before = _balance(owner)

    nas_set_size(user=owner, size_gb=77)

    # 27 GB × 2 fen × 15/24 = 33.75 → 34 fen
    key = f"storage-grow:{nas.id}:{T0.date().isoformat()}:77"
    assert LedgerTransaction.objects.get(idempotency_key=key).amount_fen == -34
    assert _balance(owner) == before - 34


def test_growth_in_arrears_is_refused_with_409_and_changes_nothing(owner, client_for):
    disk = disk_create(user=owner, name="ckpt", size_gb=100)
    nas, _ = nas_set_size(user=owner, size_gb=10)
    StorageArrears.objects.create(tenant_id=owner.tenant_id, deadline=T0 + timedelta(days=15))
    before = _balance(owner)
    client = client_for(owner)

    grown = client.patch(f"/api/v1/disks/{disk.id}", {"size_gb": 250}, format="json")
    nas_grown = client.put("/api/v1/nas", {"size_gb": 20}, format="json")

    for response in (grown, nas_grown):
        assert (response.status_code, response.json()["code"]) == (409, "storage_arrears")
        assert "top up first" in response.json()["detail"].lower()
    disk.refresh_from_db()
    nas.refresh_from_db()
    assert (disk.size_gb, nas.size_gb, _balance(owner)) == (100, 10, before)
    assert not LedgerTransaction.objects.filter(idempotency_key__startswith="storage-grow:")


def test_growth_the_balance_cannot_pay_is_refused_with_402_and_changes_nothing(frozen, client_for):
    owner = make_user()  # the ¥10 trial, which storage does not spend
    fund(owner, 1_000)  # ¥10 of cash
    disk = disk_create(user=owner, name="ckpt", size_gb=900)  # 900 of the 1000 fen of cash
    before = _balance(owner)
    client = client_for(owner)

    # 900 GB more × 15/24 = 562.5 → 563 fen > 100 fen left
    grown = client.patch(f"/api/v1/disks/{disk.id}", {"size_gb": 1800}, format="json")

    assert grown.status_code == 402, grown.json()
    disk.refresh_from_db()
    assert (disk.size_gb, _balance(owner)) == (900, before)
    assert Disk.objects.get(pk=disk.id).size_gb == 900
