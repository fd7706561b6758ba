"""GB-day charges for cloud disks and the shared NAS, and the grace period when the balance
cannot pay, on a frozen clock (the `clock` fixture sets what timezone.now answers)."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.utils import quote
from django.core import mail

from billing.models import LedgerTransaction
from billing.payments import bank_transfer_post
from billing.selectors import wallet_for_tenant
from storage.billing import storage_bill
from storage.disks import disk_create
from storage.models import Disk, SharedStorage, StorageArrears, StoragePrice
from storage.nas import nas_set_size
from tests.factories import fund, make_operator, make_user, staff_login

SHANGHAI = ZoneInfo("Asia/Shanghai")
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=SHANGHAI)


class Clock:
    def __init__(self, now, capture):
        self.now, self.capture = now, capture

    def bill(self, now):
        """Move the clock to `now` and run storage billing, its e-mails sent (after commit)."""
        self.now = now
        with self.capture(execute=True):
            return storage_bill()


@pytest.fixture
def clock(monkeypatch, django_capture_on_commit_callbacks):
    from django.utils import timezone

    frozen = Clock(T0, django_capture_on_commit_callbacks)
    monkeypatch.setattr(timezone, "now", lambda: frozen.now)
    return frozen


@pytest.fixture
def prices(db, clock):
    StoragePrice.objects.create(kind="disk", price_per_gb_day_fen=1)
    StoragePrice.objects.create(kind="nas", price_per_gb_day_fen=2)


@pytest.fixture
def owner(prices):
    user = make_user()
    fund(user, 2_000)  # + ¥10 trial = ¥30
    return user


def _storage_charges(tenant_id):
    return list(
        LedgerTransaction.objects.filter(
            wallet__tenant_id=tenant_id, idempotency_key__startswith="storage:"
        ).values_list("idempotency_key", "amount_fen")
    )


def test_each_volume_is_charged_once_per_day_however_often_billing_runs(owner, clock):
    disk = disk_create(user=owner, name="ckpt", size_gb=100)
    nas, _created = nas_set_size(user=owner, size_gb=50)
    created_day = len(_storage_charges(owner.tenant_id))

    for hour in (0, 0, 1, 5):  # duplicate and late runs on the same day
        clock.bill(T0.replace(hour=9 + hour))
    clock.bill(T0 + timedelta(days=1))
    clock.bill(T0 + timedelta(days=1, hours=3))

    charges = dict(_storage_charges(owner.tenant_id))
    today = T0.date().isoformat()
    tomorrow = (T0 + timedelta(days=1)).date().isoformat()
    assert created_day == 2  # the first day is charged at creation
    assert charges[f"storage:{disk.id}:{today}"] == -100
    assert charges[f"storage:{nas.id}:{today}"] == -100  # 50 GB × 2 fen
    assert charges[f"storage:{disk.id}:{tomorrow}"] == -100
    assert charges[f"storage:{nas.id}:{tomorrow}"] == -100
    assert len(charges) == 4
    assert wallet_for_tenant(owner.tenant_id).total_fen == 3_000 - 400


def test_deleted_disks_stop_costing(owner, clock):
    disk = disk_create(user=owner, name="ckpt", size_gb=100)
    Disk.objects.filter(pk=disk.pk).update(status="deleted")

    clock.bill(T0 + timedelta(days=1))

    assert len(_storage_charges(owner.tenant_id)) == 1


def test_unpaid_storage_is_kept_warned_about_and_deleted_after_the_grace_period(
    owner, settings, clock
):
    settings.STORAGE_GRACE_DAYS = 15
    disk = disk_create(user=owner, name="ckpt", size_gb=2_000)  # ¥20 a day
    start = T0 + timedelta(days=1)  # ¥10 left: tomorrow cannot be paid
    mail.outbox.clear()

    clock.bill(start)
    arrears = StorageArrears.objects.get(tenant_id=owner.tenant_id)
    assert arrears.deadline == start + timedelta(days=15)
    assert len(_storage_charges(owner.tenant_id)) == 1  # nothing taken
    assert wallet_for_tenant(owner.tenant_id).total_fen == 1_000
    assert len(mail.outbox) == 1 and owner.email in mail.outbox[0].to

    warned_at = {}
    for day in range(1, 15):
        mail.outbox.clear()
        clock.bill(start + timedelta(days=day))
        if mail.outbox:
            warned_at[15 - day] = mail.outbox[0].body
    assert sorted(warned_at) == [1, 3, 7]
    assert "7" in warned_at[7] and "ckpt" not in warned_at[7]
    disk.refresh_from_db()
    assert disk.status == "creating"  # still kept on the last day (no cluster here)

    clock.bill(start + timedelta(days=15))
    disk.refresh_from_db()
    arrears.refresh_from_db()
    assert disk.status == "deleting"
    assert (arrears.resolution, arrears.resolved_at) == ("deleted", start + timedelta(days=15))
    assert len(_storage_charges(owner.tenant_id)) == 1


def test_a_top_up_ends_the_countdown(owner, clock, django_capture_on_commit_callbacks):
    disk = disk_create(user=owner, name="ckpt", size_gb=2_000)
    clock.bill(T0 + timedelta(days=1))
    assert StorageArrears.objects.filter(resolved_at__isnull=True).count() == 1

    with django_capture_on_commit_callbacks(execute=True):
        bank_transfer_post(
            wallet_id=owner.tenant.wallet.id,
            amount_fen=50_000,
            payer="Tsinghua University",
            reference="BOC-2026-1201-0042",
            reason="grant payment",
            actor=make_operator(),
        )

    arrears = StorageArrears.objects.get(tenant_id=owner.tenant_id)
    assert arrears.resolution == "paid"
    disk.refresh_from_db()
    assert disk.status == "creating"  # untouched: not deleting
    keys = [key for key, _fen in _storage_charges(owner.tenant_id)]
    assert len(keys) == 2  # the day in arrears is charged once the money is there


def test_the_disk_list_shows_the_countdown(owner, clock, client_for):
    disk_create(user=owner, name="ckpt", size_gb=2_000)
    client = client_for(owner)
    assert client.get("/api/v1/disks").json()["results"][0]["delete_after"] is None

    clock.bill(T0 + timedelta(days=1))

    listed = client.get("/api/v1/disks").json()["results"][0]
    assert listed["delete_after"].startswith("2026-12-17")


def test_nas_is_one_per_tenant_and_only_grows(owner):
    nas, created = nas_set_size(user=owner, size_gb=50)
    again, created_again = nas_set_size(user=owner, size_gb=80)

    assert created and not created_again and again.pk == nas.pk
    assert SharedStorage.objects.get(pk=nas.pk).size_gb == 80
    with pytest.raises(Exception, match="only grow"):
        nas_set_size(user=owner, size_gb=10)


def test_operators_see_disks_nas_prices_and_arrears_in_the_admin(owner, client, clock):
    from tests.factories import make_operator

    disk = disk_create(user=owner, name="ckpt", size_gb=1_900)  # of ¥20 of cash
    nas, _created = nas_set_size(user=owner, size_gb=10)
    clock.bill(T0 + timedelta(days=1))
    staff_login(client, make_operator())

    pages = {
        "disk": client.get("/admin/storage/disk/"),
        "price": client.get("/admin/storage/storageprice/"),
        "arrears": client.get("/admin/storage/storagearrears/"),
        "nas": client.get("/admin/storage/sharedstorage/"),
    }

    assert {name: page.status_code for name, page in pages.items()} == dict.fromkeys(pages, 200)
    assert disk.id in pages["disk"].content.decode()
    assert nas.id in pages["nas"].content.decode()
    assert "¥0.30" in pages["price"].content.decode()  # 1 fen per GB-day = ¥0.30 per 30 days
    assert str(owner.tenant) in pages["arrears"].content.decode()
    assert client.get(f"/admin/storage/disk/{quote(disk.id)}/delete/").status_code == 403


def _saved_image(owner, name, size_bytes, status="ready"):
    from compute.models import Image

    return Image.objects.create(
        id=f"img_{name.upper()}",
        name=name,
        description="",
        container_image=f"127.0.0.1:5000/t-x/{name}:1",
        tenant_id=owner.tenant_id,
        status=status,
        size_bytes=size_bytes,
    )


def test_a_tenants_images_of_a_known_size_cost_a_gb_day_like_a_disk(owner, clock, client):
    StoragePrice.objects.create(kind="image", price_per_gb_day_fen=3)
    saved = _saved_image(owner, "env", 12_300_000_001)  # 13 GB, rounded up
    _saved_image(owner, "brought", 0)  # size unknown: free
    _saved_image(owner, "saving", 5_000_000_000, status="saving")
    gone = _saved_image(owner, "gone", 5_000_000_000)
    gone.active = False
    gone.save(update_fields=["active"])

    clock.bill(T0)
    clock.bill(T0.replace(hour=15))
    clock.bill(T0 + timedelta(days=1))

    today = T0.date().isoformat()
    tomorrow = (T0 + timedelta(days=1)).date().isoformat()
    assert sorted(_storage_charges(owner.tenant_id)) == [
        (f"storage:{saved.id}:{today}", -39),
        (f"storage:{saved.id}:{tomorrow}", -39),
    ]
    charge = LedgerTransaction.objects.get(idempotency_key=f"storage:{saved.id}:{today}")
    assert charge.description == "Image storage"
    assert wallet_for_tenant(owner.tenant_id).total_fen == 3_000 - 78
    # the price list shows it beside the disks
    assert "Your images" in client.get("/").content.decode()


def test_unpaid_images_are_deactivated_with_the_storage_at_the_deadline(owner, clock, settings):
    from compute.models import Image

    StoragePrice.objects.create(kind="image", price_per_gb_day_fen=1_000)
    saved = _saved_image(owner, "env", 10_000_000_000)  # 10 000 fen a day: more than ¥30

    clock.bill(T0)
    assert StorageArrears.objects.filter(tenant_id=owner.tenant_id).count() == 1
    assert Image.objects.get(pk=saved.pk).active is True
    clock.bill(T0 + timedelta(days=settings.STORAGE_GRACE_DAYS, hours=1))

    assert Image.objects.get(pk=saved.pk).active is False
    assert _storage_charges(owner.tenant_id) == []
