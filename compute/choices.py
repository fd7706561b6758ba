from django.db import models
from django.utils.translation import gettext_lazy as _


class OfferingKind(models.TextChoices):
    BARE_METAL = "bare_metal", _("Bare metal (whole node)")
    CLOUD = "cloud", _("Cloud GPU")


class BillingMode(models.TextChoices):
    HOURLY = "hourly", _("Pay as you go (per minute)")
    MONTHLY = "monthly", _("Monthly")
    # GPUs no paying order needs, at the offering's spot price, taken back with notice when
    # an hourly or monthly order needs them (compute.preemption)
    SPOT = "spot", _("Interruptible (spot)")


# What may preempt a spot holding: the paying billing modes.
PAYING = (BillingMode.HOURLY, BillingMode.MONTHLY)


class HoldingKind(models.TextChoices):
    """What holds the GPUs (compute.models.Holding): each kind is one product's row."""

    INSTANCE = "instance", _("Instance")
    RANK = "rank", _("Cluster rank")
    REPLICA = "replica", _("Endpoint replica")


class HoldingState(models.TextChoices):
    """Where a holding stands with GPUs: waiting in line for them, holding them (its
    allocations), or holding none and waiting for none."""

    QUEUED = "queued", _("Waiting for GPUs")
    PLACED = "placed", _("Holding GPUs")
    RELEASED = "released", _("Holding none")


class ImageStatus(models.TextChoices):
    """Where a tenant's image stands: being saved from an instance, ready to order, or failed
    (its error says why). Catalogue images are always ready."""

    SAVING = "saving", _("Saving")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")


# A saved image is saving until its build pod ends; ready and failed are final.
IMAGE_TRANSITIONS: dict[str, set[str]] = {
    ImageStatus.SAVING: {ImageStatus.READY, ImageStatus.FAILED},
    ImageStatus.READY: set(),
    ImageStatus.FAILED: set(),
}
