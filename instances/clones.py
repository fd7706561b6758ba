"""Cloning an instance: a new order (the order path of instances.lifecycle, so the same
admission, idempotency, placement and queue) of the source's image and settings, whose first
start restores its system disk and own disk from CSI snapshots of the source's
(instances.provisioning.converge). The source may keep running: a snapshot of a volume in use
is crash-consistent, like a power cut (what a program had not yet written out is not in it)."""

from django.utils.translation import gettext as _

from compute.choices import BillingMode
from compute.models import Offering
from instances.choices import InstanceStatus
from instances.lifecycle import catalog_offering, instance_order
from instances.models import Instance
from starverse.accounts.models import SshKey, User
from starverse.core.errors import Conflict, InvalidInput

S = InstanceStatus
# Only these have both volumes on the cluster and are not about to lose them.
CLONEABLE = (S.RUNNING, S.STOPPED)
NAME_MAX = 100


def instance_clone(
    *,
    user: User,
    source: Instance,
    name: str = "",
    offering_id: str = "",
    region: str = "",
    idempotency_key: str = "",
) -> tuple[Instance, bool]:
    """Order a clone of `source` (the caller's tenant's: the API reads it through the tenancy
    helpers): its image, ports, mirrors and automatic recovery, the source's SSH keys that are
    the orderer's own, its offering unless another is named (whose disks are no smaller), in
    its region (its volumes' snapshots are in that cluster). Answers (instance, created) as
    instance_order does; 409 `wrong_state` unless the source is running or stopped."""
    if source.status not in CLONEABLE:
        raise Conflict(
            _("Only a running or stopped instance can be cloned; this one is %(state)s.")
            % {"state": InstanceStatus(source.status).label.lower()},
            code="wrong_state",
        )
    offering = _offering(source, offering_id)
    return instance_order(
        user=user,
        offering_id=offering.id,
        image_id=source.image_id,
        name=name.strip() or clone_name(source.name),
        billing=BillingMode.SPOT if source.billing == BillingMode.SPOT else BillingMode.HOURLY,
        idempotency_key=idempotency_key,
        ssh_keys=_own_keys(user, source.ssh_key_ids),
        auto_recover=source.auto_recover,
        ports=list(source.ports),
        region=_region(source, region),
        mirrors=source.mirrors,
        clone_of=source.id,
    )


def clone_name(name: str) -> str:
    """The clone's name when the order gives none."""
    return (_("%(name)s (clone)") % {"name": name})[:NAME_MAX]


def _offering(source: Instance, offering_id: str) -> Offering:
    """The source's offering, or the one named, whose system disk and own disk hold the
    source's (a restored volume is at least its snapshot's size)."""
    if not offering_id or offering_id == source.offering_id:
        return source.offering
    offering = catalog_offering(offering_id)
    if offering is None:
        raise InvalidInput(
            _("Unknown offering %(id)s.") % {"id": offering_id}, code="unknown_offering"
        )
    if (
        offering.system_disk_gb < source.offering.system_disk_gb
        or offering.local_disk_gb < source.offering.local_disk_gb
    ):
        raise InvalidInput(
            _(
                "The disks of %(offering)s (system %(system)d GB, own %(own)d GB) are smaller "
                "than the source's (%(source_system)d GB, %(source_own)d GB): choose an "
                "offering with disks at least as large."
            )
            % {
                "offering": offering.id,
                "system": offering.system_disk_gb,
                "own": offering.local_disk_gb,
                "source_system": source.offering.system_disk_gb,
                "source_own": source.offering.local_disk_gb,
            },
            code="clone_disks_too_small",
            field="offering",
        )
    return offering


def _region(source: Instance, region: str) -> str:
    """The source's region: the snapshots of its volumes are in that region's cluster."""
    if region and source.region_id and region != source.region_id:
        raise InvalidInput(
            _(
                "A clone is made in its source's region (%(region)s), where the snapshots of "
                "its disks are: leave region out or give %(region)s."
            )
            % {"region": source.region_id},
            code="clone_other_region",
            field="region",
        )
    return source.region_id or region


def _own_keys(user: User, key_ids: list[str]) -> list[str]:
    """The source's SSH keys that are the orderer's (keys belong to people: another member's
    key is not theirs to install); none listed means every key of the tenant, as before."""
    if not key_ids:
        return []
    own = set(
        SshKey.objects.filter(user__tenant_id=user.personal_tenant_id, pk__in=key_ids).values_list(
            "pk", flat=True
        )
    )
    return [key for key in key_ids if key in own]
