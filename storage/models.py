"""Storage a tenant keeps apart from any one instance: cloud disks, the shared NAS, and what a
GB of each costs per day. Tables keep the names they had before this app existed
(`instances_disk`, `datasets_sharedstorage` …), so moving the code moved no data.

A disk points at the instance it is attached to (`Disk.instance`); that foreign key is the only
link from storage up to instances, and storage code never imports the instances app."""

from django.db import models
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from fleet.models import DEFAULT_REGION
from starverse.core.ids import PublicIdField
from storage.choices import DiskStatus, StorageKind


class Disk(models.Model):
    """A cloud disk: a PersistentVolumeClaim of the operator's StorageClass in the tenant's
    namespace, never owner-referenced, so it outlives every instance it is attached to and only
    an explicit delete removes it. Attached to at most one instance at a time (`instance`);
    mounted at /mnt/<name>. `status` is `attached` exactly while `instance` is set."""

    id = PublicIdField(prefix="dsk")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="disks")
    created_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=63)
    size_gb = models.PositiveIntegerField()
    status = models.CharField(
        max_length=16, choices=DiskStatus.choices, default=DiskStatus.CREATING, db_index=True
    )
    instance = models.ForeignKey(
        "instances.Instance", null=True, blank=True, on_delete=models.PROTECT, related_name="disks"
    )
    region = models.ForeignKey(
        "fleet.Region",
        on_delete=models.PROTECT,
        related_name="+",
        default=DEFAULT_REGION,
        help_text="The region (cluster) the claim lives in: it attaches only to instances there.",
    )
    storage_class = models.CharField(max_length=253, blank=True)
    k8s_namespace = models.CharField(max_length=63, blank=True)
    k8s_name = models.CharField(max_length=63, blank=True)
    origin = models.CharField(
        max_length=100, blank=True, help_text="The instance whose own disk this was, if kept."
    )
    error_message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "instances_disk"
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=~Q(status="deleted"),
                name="disk_name_per_tenant",
            ),
            models.CheckConstraint(condition=Q(size_gb__gte=1), name="disk_size"),
            models.CheckConstraint(
                condition=Q(status="attached", instance__isnull=False)
                | (~Q(status="attached") & Q(instance__isnull=True)),
                name="disk_attached_has_instance",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.name}"

    @property
    def mount_path(self) -> str:
        return f"/mnt/{self.name}"


class StoragePrice(models.Model):
    """What a GB of cloud disk or shared NAS costs per day, set by operators."""

    kind = models.CharField(max_length=8, choices=StorageKind.choices, primary_key=True)
    price_per_gb_day_fen = models.PositiveIntegerField()

    class Meta:
        db_table = "instances_storageprice"
        ordering = ["kind"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.price_per_gb_day_fen} fen/GB·day"


class StorageArrears(models.Model):
    """A tenant whose balance could not pay a day of storage: nothing is charged and nothing is
    deleted until `deadline`; warnings go out at 7, 3 and 1 days left; a top-up that pays for
    the day ends it (`resolution` = paid), otherwise the storage is deleted at the deadline."""

    class Resolution(models.TextChoices):
        PAID = "paid", _("Paid after a top-up")
        DELETED = "deleted", _("Storage deleted")

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    started_at = models.DateTimeField(default=timezone.now)
    deadline = models.DateTimeField()
    warned_days = models.JSONField(default=list, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=16, choices=Resolution.choices, blank=True)

    class Meta:
        db_table = "instances_storagearrears"
        ordering = ["-started_at"]
        verbose_name_plural = "storage arrears"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"],
                condition=Q(resolved_at__isnull=True),
                name="storage_arrears_one_open",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} until {self.deadline:%Y-%m-%d}"


class SharedStorageQuerySet(QuerySet["SharedStorage"]):
    def live(self) -> "SharedStorageQuerySet":
        return self.filter(status__in=SharedStorage.LIVE)


class SharedStorage(models.Model):
    """A tenant's shared NAS: one ReadWriteMany claim mounted at /nas in every one of its
    instances, sized (its quota) and billed per GB-day like cloud disks; how full it is comes
    from the kubelets' volume statistics."""

    class Status(models.TextChoices):
        CREATING = "creating", _("Creating")
        READY = "ready", _("Ready")
        DELETING = "deleting", _("Deleting")
        DELETED = "deleted", _("Deleted")

    LIVE = (Status.CREATING, Status.READY)

    id = PublicIdField(prefix="nas")
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    size_gb = models.PositiveIntegerField(help_text="The quota: the claim's size.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.CREATING)
    k8s_name = models.CharField(max_length=63)
    used_bytes = models.BigIntegerField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = SharedStorageQuerySet.as_manager()

    class Meta:
        db_table = "datasets_sharedstorage"
        verbose_name = "shared NAS"
        verbose_name_plural = "shared NAS"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"],
                condition=Q(status__in=["creating", "ready", "deleting"]),
                name="one_nas_per_tenant",
            ),
            models.CheckConstraint(condition=Q(size_gb__gte=1), name="nas_size"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.size_gb} GB"

    @property
    def used_ratio(self) -> float | None:
        if self.used_bytes is None:
            return None
        return self.used_bytes / (self.size_gb * 2**30)
