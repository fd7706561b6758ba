from django.db import models
from django.utils.translation import gettext_lazy as _


class JobStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    PROVISIONING = "provisioning", _("Provisioning")
    RUNNING = "running", _("Running")
    RECOVERING = "recovering", _("Recovering")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLING = "cancelling", _("Cancelling")
    CANCELLED = "cancelled", _("Cancelled")


# A job in one of these has ended: its GPUs are given back and it changes no more.
ENDED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class JobBilling(models.TextChoices):
    """How a job's rank is billed (compute.choices.BillingMode, less monthly)."""

    HOURLY = "hourly", _("Pay as you go (per minute)")
    SPOT = "spot", _("Interruptible (spot)")
