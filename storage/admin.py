"""The operator's storage screens: cloud disks, each tenant's shared NAS, storage prices and
unpaid storage. Disks and NAS are the tenants' data: read-only here; only the owner (or the end
of an unpaid grace period) deletes one."""

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from starverse.core.money import format_fen
from storage.models import Disk, SharedStorage, StorageArrears, StoragePrice


@admin.register(Disk)
class DiskAdmin(admin.ModelAdmin[Disk]):
    """Cloud disks are the tenants' data: operators see and search them; only the owner (or
    the end of an unpaid grace period) deletes one."""

    list_display = [
        "id",
        "name",
        "tenant",
        "size_gb",
        "status",
        "instance",
        "k8s_name",
        "created_at",
    ]
    list_filter = ["status"]
    search_fields = ["id", "name", "tenant__members__email", "k8s_name", "instance__id"]
    readonly_fields = [f.name for f in Disk._meta.fields]

    def has_add_permission(self, request: HttpRequest, obj: Disk | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Disk | None = None) -> bool:
        return False


@admin.register(StoragePrice)
class StoragePriceAdmin(admin.ModelAdmin[StoragePrice]):
    list_display = ["kind", "price_per_gb_day_fen", "per_gb_month"]

    @admin.display(description=_("Per GB and 30 days"))
    def per_gb_month(self, obj: StoragePrice) -> str:
        return format_fen(obj.price_per_gb_day_fen * 30)


@admin.register(StorageArrears)
class StorageArrearsAdmin(admin.ModelAdmin[StorageArrears]):
    """Tenants whose storage is unpaid, with their deadline; read-only (a top-up ends it)."""

    list_display = ["tenant", "started_at", "deadline", "warned_days", "resolved_at", "resolution"]
    list_filter = ["resolution"]
    search_fields = ["tenant__members__email"]
    readonly_fields = [f.name for f in StorageArrears._meta.fields]

    def has_add_permission(self, request: HttpRequest, obj: StorageArrears | None = None) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: StorageArrears | None = None
    ) -> bool:
        return False


@admin.register(SharedStorage)
class SharedStorageAdmin(admin.ModelAdmin[SharedStorage]):
    """Each tenant's shared NAS with its quota and measured usage; read-only here."""

    list_display = ["id", "tenant", "size_gb", "used_bytes", "used_at", "status", "created_at"]
    list_filter = ["status"]
    search_fields = ["id", "tenant__members__email"]
    readonly_fields = [f.name for f in SharedStorage._meta.fields]

    def has_add_permission(self, request: HttpRequest, obj: SharedStorage | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: SharedStorage | None = None) -> bool:
        return False
