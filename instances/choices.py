from django.db import models
from django.utils.translation import gettext_lazy as _


class OfferingKind(models.TextChoices):
    BARE_METAL = "bare_metal", _("Bare metal (whole node)")
    CLOUD = "cloud", _("Cloud GPU")


class BillingMode(models.TextChoices):
    HOURLY = "hourly", _("Pay as you go (per minute)")
    MONTHLY = "monthly", _("Monthly")


class InstanceStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    PROVISIONING = "provisioning", _("Provisioning")
    RUNNING = "running", _("Running")
    STOPPING = "stopping", _("Stopping")
    STOPPED = "stopped", _("Stopped")
    TERMINATING = "terminating", _("Terminating")
    TERMINATED = "terminated", _("Terminated")
    FAILED = "failed", _("Failed")


S = InstanceStatus
INSTANCE_TRANSITIONS: dict[str, set[str]] = {
    # → failed: a queued monthly rental whose month cannot be paid when its turn comes
    S.QUEUED: {S.PROVISIONING, S.FAILED, S.TERMINATING},
    # → queued: automatic recovery after node loss places the instance again
    S.PROVISIONING: {S.RUNNING, S.FAILED, S.STOPPING, S.TERMINATING, S.QUEUED},
    S.RUNNING: {S.STOPPING, S.FAILED, S.TERMINATING, S.PROVISIONING, S.QUEUED},
    S.STOPPING: {S.STOPPED, S.TERMINATING},
    S.STOPPED: {S.PROVISIONING, S.QUEUED, S.TERMINATING},
    S.FAILED: {S.PROVISIONING, S.QUEUED, S.TERMINATING},
    S.TERMINATING: {S.TERMINATED},
    S.TERMINATED: set(),
}
# States that hold GPUs on a node.
HOLDS_GPUS = (S.PROVISIONING, S.RUNNING, S.STOPPING)
