"""Per-tenant shared NAS: one ReadWriteMany volume per tenant, mounted at /nas in every one of
its instances, sized (its quota) and billed per GB-day like cloud disks. The claim is made and
removed by instances.provisioning.storage; how full it is comes from the kubelets' volume
statistics."""

from django.db import models
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from starverse.core.ids import PublicIdField


class SharedStorageQuerySet(QuerySet):
    def live(self) -> "SharedStorageQuerySet":
        return self.filter(status__in=SharedStorage.LIVE)


class SharedStorage(models.Model):
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
