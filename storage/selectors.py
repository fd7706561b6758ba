"""Reads of storage that more than one page or route needs."""

from django.db.models import QuerySet
from django.utils.translation import gettext as _

from billing.usage import Resource
from starverse.accounts.models import User
from starverse.core.tenancy import scope_to_user
from storage.choices import DiskStatus
from storage.models import Disk


def tenant_disks(user: User) -> QuerySet[Disk]:
    """The user's tenant's disks that still exist (being deleted included)."""
    return scope_to_user(Disk.objects.all(), user, "tenant").exclude(status=DiskStatus.DELETED)


def free_disks(user: User) -> list[Disk]:
    """The user's disks that can be attached now: not attached, not being deleted."""
    return list(
        tenant_disks(user)
        .filter(status__in=(DiskStatus.CREATING, DiskStatus.AVAILABLE))
        .order_by("name")
    )


def disks_named(ids: set[str]) -> dict[str, Resource]:
    """The cloud disks among `ids`, as usage reports name them (the account's, no member):
    billing.usage.resource_namer_register, from storage.apps."""
    rows = Disk.objects.filter(pk__in=ids).values_list("id", "name")
    return {
        pk: Resource(_("Cloud disk %(name)s (%(id)s)") % {"name": name, "id": pk})
        for pk, name in rows
    }
