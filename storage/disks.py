"""Cloud disks: create, resize and delete them, and bind them to (or free them from) an
instance's row. A disk is a PersistentVolumeClaim that outlives the instances it is attached
to; the database row is the truth and the claim is converged to it by tasks
(storage.provisioning). When an attach or detach needs the instance restarted is the instances
app's rule (instances.volumes); this module only keeps a disk's own invariants."""

import logging
import re

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.holds import account_hold_check
from fleet.models import DEFAULT_REGION
from fleet.selectors import region_orderable
from starverse.accounts.models import User
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, InvalidInput, NotFound
from starverse.core.kube import namespace_name
from starverse.core.roles import require_orderer
from storage.billing import storage_charge_growth, storage_charge_new
from storage.choices import LIVE_DISK, DiskStatus, StorageKind
from storage.manifests import cloud_disk_name
from storage.models import Disk

logger = logging.getLogger(__name__)
D = DiskStatus
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _size(size_gb: int) -> int:
    if not 1 <= size_gb <= settings.DISK_MAX_GB:
        raise InvalidInput(
            _("A disk is 1 to %(max)d GB.") % {"max": settings.DISK_MAX_GB}, code="disk_size"
        )
    return size_gb


def _name(name: str) -> str:
    name = name.strip()
    if not NAME.match(name):
        raise InvalidInput(
            _(
                "A disk name is 1–63 letters, digits, dots, dashes or underscores, starting "
                "with a letter or digit; it becomes the mount path /mnt/<name>."
            ),
            code="disk_name",
        )
    return name


def disk_for_tenant(tenant_id: str, disk_id: str, *, lock: bool = False) -> Disk:
    """The tenant's live disk with this id; another tenant's (or a deleted) disk is a 404."""
    rows = Disk.objects.filter(tenant_id=tenant_id, pk=disk_id).exclude(status=D.DELETED)
    disk = (rows.select_for_update() if lock else rows).first()
    if disk is None:
        raise NotFound(_("No disk %(id)s.") % {"id": disk_id}, code="disk_not_found")
    return disk


def disk_create(*, user: User, name: str, size_gb: int, region: str = "") -> Disk:
    """A new empty disk in a region ("" = the default region): a claim in that region's
    cluster, attachable only to instances there. Its first day is charged at once, so creating
    one needs a balance that pays a day of it (storage.billing), and an account not on hold."""
    require_orderer(user)
    name, size_gb = _name(name), _size(size_gb)
    region = region_orderable(region).pk if region else DEFAULT_REGION
    account_hold_check(user.tenant_id)
    live = Disk.objects.filter(tenant_id=user.tenant_id, status__in=LIVE_DISK)
    if live.count() >= settings.DISKS_PER_TENANT:
        raise Conflict(
            _("You have %(n)d disks, the most an account may have; delete one first.")
            % {"n": settings.DISKS_PER_TENANT},
            code="disk_limit",
        )
    disk = Disk(
        tenant_id=user.tenant_id,
        created_by=user,
        name=name,
        size_gb=size_gb,
        storage_class=settings.DISK_STORAGE_CLASS or "",
        k8s_namespace=namespace_name(user.tenant_id),
        region_id=region,
    )
    disk.k8s_name = cloud_disk_name(disk.id)
    try:
        with transaction.atomic():
            disk.save(force_insert=True)
            storage_charge_new(tenant_id=user.tenant_id, kind=StorageKind.DISK, obj=disk)
            enqueue_on_commit("storage.tasks.ensure_disk", disk.id)
    except IntegrityError:
        raise Conflict(
            _("You already have a disk named %(name)s.") % {"name": name}, code="disk_name_taken"
        ) from None
    logger.info("disk.created disk=%s tenant=%s size_gb=%d", disk.id, disk.tenant_id, size_gb)
    return disk


def disk_resize(*, tenant_id: str, disk_id: str, size_gb: int) -> Disk:
    """Grow a disk (claims can only grow). The file system grows online; the added GB are
    charged at once for the rest of today (storage.billing.storage_charge_growth): refused while
    the tenant's storage is in arrears (409), when the balance cannot pay it (402) or while the
    account is on hold (403)."""
    size_gb = _size(size_gb)
    with transaction.atomic():
        disk = disk_for_tenant(tenant_id, disk_id, lock=True)
        if disk.status not in LIVE_DISK:
            raise Conflict(_("This disk is being deleted."), code="wrong_state")
        if size_gb < disk.size_gb:
            raise InvalidInput(
                _("A disk can only grow: it is %(have)d GB, so ask for more than that.")
                % {"have": disk.size_gb},
                code="disk_shrink",
            )
        if size_gb == disk.size_gb:
            return disk
        account_hold_check(tenant_id)
        storage_charge_growth(
            tenant_id=tenant_id, kind=StorageKind.DISK, obj=disk, new_size_gb=size_gb
        )
        disk.size_gb = size_gb
        disk.save(update_fields=["size_gb"])
        enqueue_on_commit("storage.tasks.ensure_disk", disk.id)
    return disk


def disk_delete(*, tenant_id: str, disk_id: str) -> Disk:
    """Delete a disk and its data; refused while it is attached."""
    with transaction.atomic():
        disk = disk_for_tenant(tenant_id, disk_id, lock=True)
        if disk.status == D.DELETING:
            return disk
        if disk.instance_id is not None:
            raise Conflict(
                _("The disk is attached to %(instance)s; detach it or terminate that first.")
                % {"instance": disk.instance_id},
                code="disk_attached",
            )
        disk.status = D.DELETING
        disk.save(update_fields=["status"])
        enqueue_on_commit("storage.tasks.delete_disk", disk.id)
    logger.info("disk.deleting disk=%s tenant=%s", disk.id, tenant_id)
    return disk


def disk_bind(disk: Disk, instance_id: str) -> None:
    """Attach a locked disk to an instance's row: refused while it is being deleted or is
    attached to another instance (a disk is on one instance at a time)."""
    if disk.status == D.DELETING:
        raise Conflict(_("The disk %(name)s is being deleted.") % {"name": disk.name})
    if disk.instance_id is not None and disk.instance_id != instance_id:
        raise Conflict(
            _("The disk %(name)s is attached to %(instance)s; detach it first.")
            % {"name": disk.name, "instance": disk.instance_id},
            code="disk_attached",
        )
    # (no two disks of one instance share a mount path: names are unique per tenant)
    disk.instance_id, disk.status = instance_id, D.ATTACHED
    disk.save(update_fields=["instance", "status"])


def disk_unbind(disk: Disk) -> None:
    """Free a locked disk from its instance, data intact."""
    disk.instance_id, disk.status = None, D.AVAILABLE
    disk.save(update_fields=["instance", "status"])


def disks_release(instance_id: str) -> list[str]:
    """Every cloud disk attached to the instance becomes available again, data intact; returns
    their names. Runs inside the transaction that terminates the instance."""
    names = []
    for disk in Disk.objects.select_for_update().filter(instance_id=instance_id):
        disk_unbind(disk)
        names.append(disk.name)
    return names


def disk_adopt(
    *,
    tenant_id: str,
    created_by_id: str | None,
    name: str,
    size_gb: int,
    namespace: str,
    claim_name: str,
    origin: str,
    region: str = DEFAULT_REGION,
) -> Disk:
    """Adopt an existing claim (a terminated instance's own disk) as a cloud disk, under the
    first free name derived from `name`; the storage task relabels the claim, and it is charged
    from now on like any cloud disk."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", name).strip("-._")[:56] or "kept-disk"
    taken = set(
        Disk.objects.filter(tenant_id=tenant_id, status__in=LIVE_DISK).values_list(
            "name", flat=True
        )
    )
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    disk = Disk.objects.create(
        tenant_id=tenant_id,
        created_by_id=created_by_id,
        name=candidate,
        size_gb=size_gb,
        status=D.AVAILABLE,
        storage_class=settings.INSTANCE_STORAGE_CLASS or "",
        k8s_namespace=namespace,
        k8s_name=claim_name,
        origin=origin,
        region_id=region,
        created_at=timezone.now(),
    )
    enqueue_on_commit("storage.tasks.ensure_disk", disk.id)
    return disk
