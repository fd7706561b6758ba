from django.db import models
from django.utils.translation import gettext_lazy as _


class DiskStatus(models.TextChoices):
    CREATING = "creating", _("Creating")
    AVAILABLE = "available", _("Available")
    ATTACHED = "attached", _("Attached")
    DELETING = "deleting", _("Deleting")
    DELETED = "deleted", _("Deleted")


# A disk that exists (and costs): not being deleted, not deleted.
LIVE_DISK = (DiskStatus.CREATING, DiskStatus.AVAILABLE, DiskStatus.ATTACHED)


class StorageKind(models.TextChoices):
    DISK = "disk", _("Cloud disk")
    NAS = "nas", _("Shared NAS")
    IMAGE = "image", _("Your images")
