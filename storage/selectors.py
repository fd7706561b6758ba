"""Reads of storage that more than one page or route needs."""

from typing import Any

from django.db.models import QuerySet

from starverse.core.tenancy import scope_to_user
from storage.choices import DiskStatus
from storage.models import Disk


def tenant_disks(user: Any) -> QuerySet[Disk]:
    """The user's tenant's disks that still exist (being deleted included)."""
    return scope_to_user(Disk.objects.all(), user, "tenant").exclude(status=DiskStatus.DELETED)


def free_disks(user: Any) -> list[Disk]:
    """The user's disks that can be attached now: not attached, not being deleted."""
    return list(
        tenant_disks(user)
        .filter(status__in=(DiskStatus.CREATING, DiskStatus.AVAILABLE))
        .order_by("name")
    )
