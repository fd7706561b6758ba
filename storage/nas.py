"""The tenant's shared NAS: create it with a quota, grow it, delete it. Like cloud disks, the
first day is charged at creation and every later day by storage.billing; new instances mount
it at /nas (running ones pick it up at their next start)."""

import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from billing.holds import account_hold_check
from compute.choices import HoldingKind
from compute.models import Allocation
from starverse.accounts.models import User
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, InvalidInput, NotFound
from starverse.core.roles import MANAGERS, require_orderer, require_role
from storage.billing import storage_charge_growth, storage_charge_new
from storage.choices import StorageKind
from storage.manifests import nas_name
from storage.models import SharedStorage

logger = logging.getLogger(__name__)
# The holdings whose pods mount the tenant's NAS: instances and clusters' ranks.
MOUNTS_NAS = (HoldingKind.INSTANCE, HoldingKind.RANK)


def _size(size_gb: int) -> int:
    if not 1 <= size_gb <= settings.NAS_MAX_GB:
        raise InvalidInput(
            _("The shared NAS is 1 to %(max)d GB.") % {"max": settings.NAS_MAX_GB},
            code="nas_size",
        )
    return size_gb


def nas_for_tenant(tenant_id: str) -> SharedStorage | None:
    return SharedStorage.objects.filter(
        tenant_id=tenant_id, status__in=[*SharedStorage.LIVE, SharedStorage.Status.DELETING]
    ).first()


def nas_set_size(*, user: User, size_gb: int) -> tuple[SharedStorage, bool]:
    """Create the tenant's NAS with this quota, or grow it to it. (nas, created). Growing is
    charged at once for the rest of today, and refused in arrears (409) or when the balance
    cannot pay it (402); see storage.billing.storage_charge_growth. Creating or growing it is
    refused while the account is on hold (403). In a team any member may create it, but it is
    the whole team's, so only owners and admins grow it (403 `role_forbidden`)."""
    require_orderer(user)
    size_gb = _size(size_gb)
    with transaction.atomic():
        nas = (
            SharedStorage.objects.select_for_update()
            .filter(tenant_id=user.tenant_id, status__in=SharedStorage.LIVE)
            .first()
        )
        if nas is not None:
            require_role(user, MANAGERS, _("changing the team's shared NAS"))
            if size_gb < nas.size_gb:
                raise InvalidInput(
                    _("The shared NAS can only grow: it is %(have)d GB.") % {"have": nas.size_gb},
                    code="nas_shrink",
                )
            if size_gb > nas.size_gb:
                account_hold_check(user.tenant_id)
                storage_charge_growth(
                    tenant_id=user.tenant_id, kind=StorageKind.NAS, obj=nas, new_size_gb=size_gb
                )
                nas.size_gb = size_gb
                nas.save(update_fields=["size_gb"])
                enqueue_on_commit("storage.tasks.ensure_nas", nas.id)
            return nas, False
        account_hold_check(user.tenant_id)
        nas = SharedStorage(tenant_id=user.tenant_id, size_gb=size_gb)
        nas.k8s_name = nas_name(nas.id)
        try:
            with transaction.atomic():
                nas.save(force_insert=True)
        except IntegrityError:
            raise Conflict(
                _("The shared NAS is still being deleted; try again in a minute."),
                code="nas_deleting",
            ) from None
        storage_charge_new(tenant_id=user.tenant_id, kind=StorageKind.NAS, obj=nas)
        enqueue_on_commit("storage.tasks.ensure_nas", nas.id)
    logger.info("nas.created nas=%s tenant=%s size_gb=%d", nas.id, user.tenant_id, size_gb)
    return nas, True


def nas_delete(*, tenant_id: str) -> SharedStorage:
    """Delete the NAS and everything on it. Refused while an instance with a pod mounts it."""
    with transaction.atomic():
        nas = (
            SharedStorage.objects.select_for_update()
            .filter(tenant_id=tenant_id, status__in=SharedStorage.LIVE)
            .first()
        )
        if nas is None:
            raise NotFound(_("You have no shared NAS."), code="no_nas")
        # An instance that holds GPUs has (or is about to have) a pod that mounts the NAS.
        using = (
            Allocation.objects.filter(holding__tenant_id=tenant_id, holding__kind__in=MOUNTS_NAS)
            .values_list("holding_id", flat=True)
            .first()
        )
        if using is not None:
            raise Conflict(
                _("The instance %(id)s mounts the NAS; stop your instances first.") % {"id": using},
                code="nas_in_use",
            )
        nas.status = SharedStorage.Status.DELETING
        nas.save(update_fields=["status"])
        enqueue_on_commit("storage.tasks.delete_nas", nas.id)
    return nas
