"""Cloud disks: create, resize, delete, attach and detach. A disk is a PersistentVolumeClaim
that outlives the instances it is attached to; the database row is the truth and the claim is
converged to it by tasks (instances.provisioning.storage). A pod's volumes cannot change while
it runs, so attaching to or detaching from a running instance restarts it, and only when the
user has confirmed that (`restart=True`)."""

import logging
import re
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from instances.choices import LIVE_DISK, DiskStatus, InstanceStatus, StorageKind
from instances.models import Disk, Instance, InstanceEvent
from instances.provisioning.manifests import cloud_disk_name, namespace_name
from starverse.core.errors import Conflict, InvalidInput, NotFound
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus
D = DiskStatus
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# States in which an instance has no pod, so its volumes can change without a restart.
PODLESS = (S.QUEUED, S.STOPPED, S.FAILED)
RESTARTABLE = (S.RUNNING, S.PROVISIONING)


def after_commit(task_name: str, *args: Any) -> None:
    """Queue an instances task once the current transaction commits."""
    from instances import tasks

    task = getattr(tasks, task_name)
    transaction.on_commit(lambda: task.delay(*args))


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


def disk_create(*, user: Any, name: str, size_gb: int) -> Disk:
    """A new empty disk. Its first day is charged at once, so creating one needs a balance
    that pays a day of it (instances.storage)."""
    from instances.storage import storage_charge_new

    name, size_gb = _name(name), _size(size_gb)
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
    )
    disk.k8s_name = cloud_disk_name(disk.id)
    try:
        with transaction.atomic():
            disk.save(force_insert=True)
            storage_charge_new(tenant_id=user.tenant_id, kind=StorageKind.DISK, obj=disk)
            after_commit("ensure_disk", disk.id)
    except IntegrityError:
        raise Conflict(
            _("You already have a disk named %(name)s.") % {"name": name}, code="disk_name_taken"
        ) from None
    logger.info("disk.created disk=%s tenant=%s size_gb=%d", disk.id, disk.tenant_id, size_gb)
    return disk


def disk_resize(*, tenant_id: str, disk_id: str, size_gb: int) -> Disk:
    """Grow a disk (claims can only grow). The file system grows online; the new size is
    charged from the next day."""
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
        disk.size_gb = size_gb
        disk.save(update_fields=["size_gb"])
        after_commit("ensure_disk", disk.id)
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
        after_commit("delete_disk", disk.id)
    logger.info("disk.deleting disk=%s tenant=%s", disk.id, tenant_id)
    return disk


def disks_attach_at_order(instance: Instance, disk_ids: list[str]) -> None:
    """Attach the ordered disks to a new instance, inside the order's transaction."""
    for disk_id in dict.fromkeys(disk_ids):
        disk = disk_for_tenant(instance.tenant_id, disk_id, lock=True)
        _attach(disk, instance)


def _attach(disk: Disk, instance: Instance) -> None:
    if disk.status == D.DELETING:
        raise Conflict(_("The disk %(name)s is being deleted.") % {"name": disk.name})
    if disk.instance_id is not None and disk.instance_id != instance.id:
        raise Conflict(
            _("The disk %(name)s is attached to %(instance)s; detach it first.")
            % {"name": disk.name, "instance": disk.instance_id},
            code="disk_attached",
        )
    # (no two disks of one instance share a mount path: names are unique per tenant)
    disk.instance_id, disk.status = instance.id, D.ATTACHED
    disk.save(update_fields=["instance", "status"])


def _volume_change(instance: Instance, *, restart: bool, what: str) -> None:
    """Check the instance can take a volume change now; schedule the restart it needs."""
    from instances.lifecycle import instance_stop

    if instance.status in PODLESS:
        return
    if instance.status not in RESTARTABLE:
        raise Conflict(
            _("Disks can be changed on a queued, stopped or running instance; this one is %(s)s.")
            % {"s": InstanceStatus(instance.status).label.lower()},
            code="wrong_state",
        )
    if not restart:
        raise Conflict(
            _(
                "The instance is running, and a running instance's disks cannot change: it must "
                "restart (unsaved work in memory is lost). Confirm with restart=true, or stop it "
                "first."
            ),
            code="restart_required",
        )
    Instance.objects.filter(pk=instance.pk).update(restart_pending=True)
    instance_stop(instance_id=instance.id, reason=what)


def disk_attach(*, instance: Instance, disk_id: str, restart: bool = False) -> Disk:
    with transaction.atomic():
        locked = Instance.objects.select_for_update().get(pk=instance.pk)
        disk = disk_for_tenant(instance.tenant_id, disk_id, lock=True)
        if disk.instance_id == locked.id:
            return disk
        _attach(disk, locked)
        InstanceEvent.objects.create(
            instance=locked,
            status=locked.status,
            message=later("Disk %(name)s attached at %(path)s.")
            % {"name": disk.name, "path": disk.mount_path},
        )
        _volume_change(
            locked,
            restart=restart,
            what=later("Restarting to attach the disk %(name)s.") % {"name": disk.name},
        )
    return disk


def disk_detach(*, instance: Instance, disk_id: str, restart: bool = False) -> Disk:
    with transaction.atomic():
        locked = Instance.objects.select_for_update().get(pk=instance.pk)
        disk = disk_for_tenant(instance.tenant_id, disk_id, lock=True)
        if disk.instance_id != locked.id:
            raise NotFound(
                _("The disk %(id)s is not attached to this instance.") % {"id": disk_id},
                code="disk_not_attached",
            )
        _volume_change(
            locked,
            restart=restart,
            what=later("Restarting to detach the disk %(name)s.") % {"name": disk.name},
        )
        disk.instance_id, disk.status = None, D.AVAILABLE
        disk.save(update_fields=["instance", "status"])
        InstanceEvent.objects.create(
            instance=locked,
            status=locked.status,
            message=later("Disk %(name)s detached.") % {"name": disk.name},
        )
    return disk


def instance_disks_release(instance: Instance) -> list[str]:
    """On terminate: every attached cloud disk becomes available again, data intact. Inside the
    transaction that terminates the instance."""
    names = []
    for disk in Disk.objects.select_for_update().filter(instance_id=instance.id):
        disk.instance_id, disk.status = None, D.AVAILABLE
        disk.save(update_fields=["instance", "status"])
        names.append(disk.name)
    return names


def instance_disk_keep(instance: Instance, claim_name: str) -> Disk:
    """Adopt a terminated instance's own disk as a cloud disk: the same claim, relabelled by the
    storage task, charged from now on like any cloud disk."""
    base = f"{instance.name}-disk"
    name = re.sub(r"[^A-Za-z0-9._-]", "-", base).strip("-._")[:56] or "kept-disk"
    taken = set(
        Disk.objects.filter(tenant_id=instance.tenant_id, status__in=LIVE_DISK).values_list(
            "name", flat=True
        )
    )
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    disk = Disk.objects.create(
        tenant_id=instance.tenant_id,
        created_by_id=instance.created_by_id,
        name=candidate,
        size_gb=instance.offering.local_disk_gb,
        status=D.AVAILABLE,
        storage_class=settings.INSTANCE_STORAGE_CLASS or "",
        k8s_namespace=instance.k8s_namespace,
        k8s_name=claim_name,
        origin=instance.id,
        created_at=timezone.now(),
    )
    after_commit("ensure_disk", disk.id)
    return disk
