from django.db import models
from django.utils.translation import gettext_lazy as _


class AutoStopKind(models.TextChoices):
    IDLE = "idle", _("Idle")
    SCHEDULE = "schedule", _("Scheduled")


class InstanceStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    PROVISIONING = "provisioning", _("Provisioning")
    CHECKING = "checking", _("Checking")
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
    # → checking: one of a gang (a cluster's rank) is up and waits for its gang's owner to
    # check the gang (a cluster's pre-flight check: instances.gangs), unbilled
    S.PROVISIONING: {S.RUNNING, S.CHECKING, S.FAILED, S.STOPPING, S.TERMINATING, S.QUEUED},
    # → running: the pre-flight passed; → queued: its node was cordoned and it moves;
    # → provisioning: its pod vanished
    S.CHECKING: {S.RUNNING, S.QUEUED, S.PROVISIONING, S.FAILED, S.STOPPING, S.TERMINATING},
    # → checking: a member of its gang was lost; billing pauses until the check passes again
    S.RUNNING: {S.STOPPING, S.FAILED, S.TERMINATING, S.PROVISIONING, S.QUEUED, S.CHECKING},
    S.STOPPING: {S.STOPPED, S.TERMINATING},
    S.STOPPED: {S.PROVISIONING, S.QUEUED, S.TERMINATING},
    S.FAILED: {S.PROVISIONING, S.QUEUED, S.TERMINATING},
    S.TERMINATING: {S.TERMINATED},
    S.TERMINATED: set(),
}
# States that hold GPUs on a node.
HOLDS_GPUS = (S.PROVISIONING, S.CHECKING, S.RUNNING, S.STOPPING)
# States that are, or are about to be, billed by the minute: what a runway counts as burning.
STARTING_OR_RUNNING = (S.PROVISIONING, S.CHECKING, S.RUNNING)
