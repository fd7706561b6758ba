"""An instance's cloud disks: attach them at order time, attach or detach them later (the
state machine gives them back when the instance terminates). A pod's volumes cannot change
while it runs, so attaching to or detaching from a running instance restarts it, and only when
the user has confirmed that (`restart=True`). The disks' own rules (one instance at a time, not
while deleting) are storage's (storage.disks)."""

from django.db import transaction
from django.utils.translation import gettext as _

from instances.choices import InstanceStatus
from instances.gangs import gang_hooks, gang_of
from instances.models import Instance, InstanceEvent
from instances.states import instance_locked, instance_mark_stopping
from starverse.accounts.models import User
from starverse.core.errors import Conflict, NotFound
from starverse.core.roles import require_own_or_manager
from starverse.core.text import later
from storage.disks import disk_bind, disk_for_tenant, disk_unbind
from storage.models import Disk

S = InstanceStatus
# States in which an instance has no pod, so its volumes can change without a restart.
PODLESS = (S.QUEUED, S.STOPPED, S.FAILED)
RESTARTABLE = (S.RUNNING, S.CHECKING, S.PROVISIONING)


def disks_attach_at_order(
    instance: Instance, disk_ids: list[str], actor: User | None = None
) -> None:
    """Attach the ordered disks to a new instance, inside the order's transaction; a member
    orders only with their own disks (starverse.core.roles)."""
    for disk_id in dict.fromkeys(disk_ids):
        disk = disk_for_tenant(instance.tenant_id, disk_id, lock=True)
        if actor is not None:
            require_own_or_manager(actor, disk)
        region_check(instance, disk)
        disk_bind(disk, instance.id)


def region_check(instance: Instance, disk: Disk) -> None:
    """A disk is a claim in its region's cluster: it attaches only to an instance of that
    region (one not placed yet and ordered for any region is kept to the disk's from then on)."""
    if instance.region_id is None:
        instance.region_id = disk.region_id
        Instance.objects.filter(pk=instance.pk).update(region_id=disk.region_id)
        return
    if disk.region_id != instance.region_id:
        raise Conflict(
            _(
                "Disk %(disk)s is in region %(disk_region)s and attaches only to instances in "
                "that region; this instance is in %(region)s."
            )
            % {"disk": disk.name, "disk_region": disk.region_id, "region": instance.region_id},
            code="wrong_region",
        )


def _volume_change(instance: Instance, *, restart: bool, what: str) -> None:
    """Check the (locked) instance can take a volume change now; a running or starting one
    is stopped, to start again once stopped. A cluster's rank changes only while it has no
    pod: restarting one rank alone would stop and start it apart from its cluster."""
    if instance.status in PODLESS:
        return
    if instance.status not in RESTARTABLE:
        raise Conflict(
            _("Disks can be changed on a queued, stopped or running instance; this one is %(s)s.")
            % {"s": InstanceStatus(instance.status).label.lower()},
            code="wrong_state",
        )
    if gang_of(instance):
        raise Conflict(
            _(
                "This instance is rank %(rank)s of the cluster %(cluster)s, whose ranks stop and "
                "start only together: stop the cluster to change this rank's disks."
            )
            % gang_hooks().member_words(instance),
            code="cluster_rank",
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
    instance_mark_stopping(instance, what, restart=True)


def disk_attach(
    *, instance: Instance, disk_id: str, restart: bool = False, actor: User | None = None
) -> Disk:
    """Attach a disk of the instance's tenant; `actor`, when given, must be allowed to change
    the disk too (a member moves only their own disks: starverse.core.roles)."""
    with transaction.atomic():
        locked = instance_locked(instance.pk)
        disk = disk_for_tenant(instance.tenant_id, disk_id, lock=True)
        if actor is not None:
            require_own_or_manager(actor, disk)
        if disk.instance_id == locked.id:
            return disk
        region_check(locked, disk)
        # a running instance restarts first and mounts the disk as it starts again: the
        # timeline says so in that order
        _volume_change(
            locked,
            restart=restart,
            what=later("Restarting to attach the disk %(name)s.") % {"name": disk.name},
        )
        disk_bind(disk, locked.id)
        InstanceEvent.objects.create(
            instance=locked,
            status=locked.status,
            message=later("Disk %(name)s attached at %(path)s.")
            % {"name": disk.name, "path": disk.mount_path},
        )
    return disk


def disk_detach(
    *, instance: Instance, disk_id: str, restart: bool = False, actor: User | None = None
) -> Disk:
    with transaction.atomic():
        locked = instance_locked(instance.pk)
        disk = disk_for_tenant(instance.tenant_id, disk_id, lock=True)
        if actor is not None:
            require_own_or_manager(actor, disk)
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
        disk_unbind(disk)
        InstanceEvent.objects.create(
            instance=locked,
            status=locked.status,
            message=later("Disk %(name)s detached.") % {"name": disk.name},
        )
    return disk
