"""Storage billing and retention. Cloud disks, the shared NAS and a tenant's own images of a known
size (saved from an instance, in the operator's registry) cost a price per GB-day set by
operators (StoragePrice; an image's GB are its bytes ÷ 10^9, rounded up): each (volume, day) is
charged once, under the ledger key storage:{volume}:{day} (days in TIME_ZONE), the first day when
the volume is created and each later day on the first run of `storage_bill` that day.
Instance-local disks are free.

When a tenant's balance cannot pay a day, nothing is charged and nothing is deleted: the
tenant enters arrears (StorageArrears) with a deadline STORAGE_GRACE_DAYS away, is warned by
e-mail when 7, 3 and 1 days are left, and a top-up that pays the day ends the countdown. Only
at the deadline is the storage deleted."""

import logging
import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.choices import TransactionKind
from billing.models import LedgerTransaction, Wallet
from billing.notices import mail_tenant
from billing.selectors import wallet_locked
from billing.services import ledger_post
from compute.choices import ImageStatus
from compute.models import Allocation, Image
from starverse.core.dispatch import enqueue_on_commit, send
from starverse.core.errors import Conflict, InsufficientBalance
from starverse.core.money import format_fen
from storage.choices import LIVE_DISK, DiskStatus, StorageKind
from storage.models import Disk, SharedStorage, StorageArrears, StoragePrice

logger = logging.getLogger(__name__)
WARN_AT_DAYS = (7, 3, 1)
DESCRIPTIONS: dict[str, str] = {
    StorageKind.DISK: gettext_noop("Cloud disk storage"),
    StorageKind.NAS: gettext_noop("Shared NAS storage"),
    StorageKind.IMAGE: gettext_noop("Image storage"),
}


@dataclass(frozen=True)
class Volume:
    kind: str
    id: str
    size_gb: int


@dataclass
class BillResult:
    charged_fen: int = 0
    charged_keys: int = 0
    arrears_started: list[str] = field(default_factory=list)
    warned: list[str] = field(default_factory=list)
    paid: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def prices() -> dict[str, int]:
    return dict(StoragePrice.objects.values_list("kind", "price_per_gb_day_fen"))


def day_fen(volume: Volume, price: dict[str, int]) -> int:
    return volume.size_gb * price.get(volume.kind, 0)


def _key(volume: Volume, day: date) -> str:
    return f"storage:{volume.id}:{day.isoformat()}"


def _billed_images() -> QuerySet[Image]:
    """A tenant's own images that cost: ready, not deleted, of a known size."""
    return Image.objects.filter(
        tenant__isnull=False, active=True, status=ImageStatus.READY, size_bytes__gt=0
    )


def tenant_volumes(tenant_id: str) -> list[Volume]:
    """Every billable volume of a tenant: live cloud disks, the live shared NAS and its own
    images of a known size."""
    volumes = [
        Volume(StorageKind.DISK, disk_id, size)
        for disk_id, size in Disk.objects.filter(
            tenant_id=tenant_id, status__in=LIVE_DISK
        ).values_list("id", "size_gb")
    ]
    volumes += [
        Volume(StorageKind.NAS, nas_id, size)
        for nas_id, size in SharedStorage.objects.live()
        .filter(tenant_id=tenant_id)
        .values_list("id", "size_gb")
    ]
    volumes += [
        Volume(StorageKind.IMAGE, image_id, math.ceil(size / 1_000_000_000))
        for image_id, size in _billed_images()
        .filter(tenant_id=tenant_id)
        .values_list("id", "size_bytes")
    ]
    return volumes


def storage_day_fen(tenant_id: str) -> int:
    """What a day of the tenant's storage costs now."""
    price = prices()
    return sum(day_fen(v, price) for v in tenant_volumes(tenant_id))


def _post(wallet_id: str, volume: Volume, day: date, amount_fen: int) -> None:
    ledger_post(
        wallet_id=wallet_id,
        key=_key(volume, day),
        kind=TransactionKind.USAGE,
        amount_fen=-amount_fen,
        description=DESCRIPTIONS[volume.kind],
    )


def storage_charge_new(*, tenant_id: str, kind: str, obj: Any, now: datetime | None = None) -> int:
    """Charge the first day of a new volume, inside the transaction that creates it: a balance
    that cannot pay it refuses the creation (402)."""
    volume = Volume(kind, obj.id, obj.size_gb)
    amount = day_fen(volume, prices())
    if amount <= 0:
        return 0
    wallet = Wallet.objects.get(tenant_id=tenant_id)
    try:
        _post(wallet.id, volume, timezone.localdate(now or timezone.now()), amount)
    except InsufficientBalance:  # the ledger decides, under its lock; we say what it means
        raise InsufficientBalance(
            _(
                "A day of this storage costs %(fen)s and your cash balance is %(have)s (trial "
                "credit does not pay for storage). Top up first."
            )
            % {"fen": format_fen(amount), "have": format_fen(wallet.cash_free_fen)}
        ) from None
    return amount


def _grow_key(volume: Volume, day: date) -> str:
    return f"storage-grow:{volume.id}:{day.isoformat()}:{volume.size_gb}"


def grow_fen(*, kind: str, old_gb: int, new_gb: int, now: datetime, price: dict[str, int]) -> int:
    """What the added GB cost for the rest of today (days in TIME_ZONE): the day's price of the
    difference times the share of the day that is left, in fen, rounded up."""
    diff_fen = (new_gb - old_gb) * price.get(kind, 0)
    if diff_fen <= 0:
        return 0
    local = timezone.localtime(now)
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    tz = local.tzinfo
    end = datetime.combine(start.date() + timedelta(days=1), datetime.min.time(), tzinfo=tz)
    left, length = end - local, end - start
    left_us = left // timedelta(microseconds=1)
    length_us = length // timedelta(microseconds=1)
    return -(-diff_fen * left_us // length_us)


def storage_charge_growth(
    *, tenant_id: str, kind: str, obj: Any, new_size_gb: int, now: datetime | None = None
) -> int:
    """Charge growing a volume from obj.size_gb to new_size_gb, inside the transaction that
    grows it. Refused (409) while the tenant's storage is in arrears and (402) when the balance
    cannot pay the rest of today's difference. If today was not billed yet, today's run bills
    the new size for the whole day, so nothing is charged now."""
    now = now or timezone.now()
    wallet = wallet_locked(tenant_id)
    if open_arrears(tenant_id) is not None:
        raise Conflict(
            _("Your storage is in arrears: top up first to pay for it, then grow the volume."),
            code="storage_arrears",
        )
    day = timezone.localdate(now)
    if not LedgerTransaction.objects.filter(
        idempotency_key=_key(Volume(kind, obj.id, obj.size_gb), day)
    ).exists():
        return 0
    amount = grow_fen(kind=kind, old_gb=obj.size_gb, new_gb=new_size_gb, now=now, price=prices())
    if amount <= 0:
        return 0
    try:
        ledger_post(
            wallet_id=wallet.id,
            key=_grow_key(Volume(kind, obj.id, new_size_gb), day),
            kind=TransactionKind.USAGE,
            amount_fen=-amount,
            description=DESCRIPTIONS[kind],
        )
    except InsufficientBalance:
        raise InsufficientBalance(
            _(
                "Growing this storage costs %(fen)s for the rest of today and your cash balance "
                "is %(have)s (trial credit does not pay for storage). Top up first."
            )
            % {"fen": format_fen(amount), "have": format_fen(wallet.cash_free_fen)}
        ) from None
    return amount


def open_arrears(tenant_id: str) -> StorageArrears | None:
    return StorageArrears.objects.filter(tenant_id=tenant_id, resolved_at__isnull=True).first()


def arrears_review_on_credit(sender: Any, tenant_id: str, **kwargs: Any) -> None:
    """Receiver of billing's `wallet_credited` (sent after commit): a credit may end a storage
    countdown, so that tenant's storage is billed now, not at the next scheduled run."""
    if open_arrears(tenant_id) is not None:
        send("storage.tasks.bill_storage", [tenant_id])


def _tenants_to_bill() -> set[str]:
    tenants = set(Disk.objects.filter(status__in=LIVE_DISK).values_list("tenant_id", flat=True))
    tenants |= set(SharedStorage.objects.live().values_list("tenant_id", flat=True))
    tenants |= {str(t) for t in _billed_images().values_list("tenant_id", flat=True)}
    tenants |= set(
        StorageArrears.objects.filter(resolved_at__isnull=True).values_list("tenant_id", flat=True)
    )
    return tenants


def storage_bill(*, now: datetime | None = None, tenant_ids: list[str] | None = None) -> BillResult:
    """Charge today's storage of every tenant (or of `tenant_ids`), exactly once per volume and
    day; run it as often as you like. Tenants that cannot pay go into (or stay in) arrears."""
    now = now or timezone.now()
    result = BillResult()
    price = prices()
    for tenant_id in sorted(tenant_ids if tenant_ids is not None else _tenants_to_bill()):
        with transaction.atomic():
            _bill_tenant(tenant_id, now, price, result)
    if result.charged_keys or result.arrears_started or result.deleted:
        logger.info(
            "storage.billed fen=%d keys=%d arrears=%s paid=%s deleted=%s",
            result.charged_fen,
            result.charged_keys,
            result.arrears_started,
            result.paid,
            result.deleted,
        )
    return result


def _bill_tenant(tenant_id: str, now: datetime, price: dict[str, int], result: BillResult) -> None:
    wallet = wallet_locked(tenant_id)
    arrears = (
        StorageArrears.objects.select_for_update()
        .filter(tenant_id=tenant_id, resolved_at__isnull=True)
        .first()
    )
    day = timezone.localdate(now)
    volumes = tenant_volumes(tenant_id)
    keys = {_key(v, day): v for v in volumes}
    done = set(
        LedgerTransaction.objects.filter(idempotency_key__in=list(keys)).values_list(
            "idempotency_key", flat=True
        )
    )
    todo = [(v, day_fen(v, price)) for key, v in keys.items() if key not in done]
    todo = [(v, fen) for v, fen in todo if fen > 0]
    due = sum(fen for _v, fen in todo)
    if due <= wallet.cash_free_fen:  # storage is paid from cash only (billing.services)
        for volume, fen in todo:
            _post(wallet.id, volume, day, fen)
        result.charged_fen += due
        result.charged_keys += len(todo)
        if arrears is not None:
            _resolve(arrears, now, StorageArrears.Resolution.PAID)
            result.paid.append(tenant_id)
        return
    if arrears is None:
        arrears = StorageArrears.objects.create(
            tenant_id=tenant_id,
            started_at=now,
            deadline=now + timedelta(days=settings.STORAGE_GRACE_DAYS),
        )
        result.arrears_started.append(tenant_id)
        _notify(arrears, due, now, "started")
        return
    if now >= arrears.deadline:
        storage_delete_all(tenant_id)
        _resolve(arrears, now, StorageArrears.Resolution.DELETED)
        result.deleted.append(tenant_id)
        _notify(arrears, due, now, "deleted")
        return
    left = days_left(arrears, now)
    crossed = [d for d in WARN_AT_DAYS if left <= d and d not in arrears.warned_days]
    if crossed:
        arrears.warned_days = sorted({*arrears.warned_days, *crossed}, reverse=True)
        arrears.save(update_fields=["warned_days"])
        result.warned.append(tenant_id)
        _notify(arrears, due, now, "warning")


def days_left(arrears: StorageArrears, now: datetime) -> int:
    """Whole days (rounded up) until the deadline."""
    return max(0, math.ceil((arrears.deadline - now).total_seconds() / 86400))


def _resolve(arrears: StorageArrears, now: datetime, resolution: str) -> None:
    arrears.resolved_at, arrears.resolution = now, resolution
    arrears.save(update_fields=["resolved_at", "resolution"])


def _notify(arrears: StorageArrears, due_fen: int, now: datetime, stage: str) -> None:
    tenant_id, deadline = arrears.tenant_id, arrears.deadline
    context = {
        "stage": stage,
        "days_left": days_left(arrears, now),
        "deadline": timezone.localtime(deadline).strftime("%Y-%m-%d %H:%M"),
        "due_fen": due_fen,
    }
    transaction.on_commit(
        lambda: mail_tenant(tenant_id, "storage/email/storage_arrears.txt", context)
    )
    logger.info(
        "notice.storage tenant=%s stage=%s days_left=%d", tenant_id, stage, context["days_left"]
    )


def storage_delete_all(tenant_id: str) -> list[str]:
    """The grace period is over: delete every volume and billed image of the tenant. Disks attached
    to an instance without a pod are detached first; an instance with a pod keeps its disks (it
    is paid for some other way, e.g. a prepaid month). An instance has a pod while it holds GPUs
    (compute.models.Allocation, of its holding: the instance's id)."""
    deleted = []
    holding = set(
        Allocation.objects.filter(holding__tenant_id=tenant_id).values_list("holding_id", flat=True)
    )
    for disk in Disk.objects.select_for_update().filter(tenant_id=tenant_id, status__in=LIVE_DISK):
        if disk.instance_id is not None and disk.instance_id in holding:
            continue
        disk.instance_id, disk.status = None, DiskStatus.DELETING
        disk.save(update_fields=["instance", "status"])
        enqueue_on_commit("storage.tasks.delete_disk", disk.id)
        deleted.append(disk.id)
    for nas in SharedStorage.objects.live().select_for_update().filter(tenant_id=tenant_id):
        SharedStorage.objects.filter(pk=nas.pk).update(status=SharedStorage.Status.DELETING)
        enqueue_on_commit("storage.tasks.delete_nas", nas.id)
        deleted.append(nas.id)
    # its images are no longer listed, ordered or billed (an instance of one still starts)
    images = list(_billed_images().filter(tenant_id=tenant_id).values_list("id", flat=True))
    Image.objects.filter(pk__in=images).update(active=False, deleted_at=timezone.now())
    return [*deleted, *images]
