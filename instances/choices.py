from django.db import models
from django.utils.translation import gettext_lazy as _


class NodeState(models.TextChoices):
    READY = "ready", _("Ready")
    CORDONED = "cordoned", _("Cordoned")
    DRAINING = "draining", _("Draining")
    DOWN = "down", _("Down")


# Who may move a node between states: operators any way; health rules only towards trouble,
# and a heartbeat back only undoes a heartbeat-down.
NODE_TRANSITIONS = {
    NodeState.READY: {NodeState.CORDONED, NodeState.DRAINING, NodeState.DOWN},
    NodeState.CORDONED: {NodeState.READY, NodeState.DRAINING, NodeState.DOWN},
    NodeState.DRAINING: {NodeState.READY, NodeState.CORDONED, NodeState.DOWN},
    NodeState.DOWN: {NodeState.READY, NodeState.CORDONED, NodeState.DRAINING},
}


class Interconnect(models.TextChoices):
    NVLINK = "nvlink", _("NVLink")
    PCIE = "pcie", _("PCIe")


class NodeEventKind(models.TextChoices):
    XID = "xid", _("XID error")
    ECC = "ecc", _("Uncorrectable ECC")
    GPU_LOST = "gpu_lost", _("GPU lost")
    HEARTBEAT = "heartbeat", _("Heartbeat lost")
    STATE = "state", _("State change")
    REGISTERED = "registered", _("Registered")


class HealthRuleKind(models.TextChoices):
    HEARTBEAT = "heartbeat", _("No report within a timeout")
    XID = "xid", _("Critical XID error")
    ECC_UNCORRECTABLE = "ecc_uncorrectable", _("Uncorrectable ECC errors")
    GPU_LOST = "gpu_lost", _("GPU lost")


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
    S.QUEUED: {S.PROVISIONING, S.TERMINATING},
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
