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
    TOKEN_RESET = "token_reset", _("Agent registration reset")
    REVIEW = "review", _("Up for review")


class HealthRuleKind(models.TextChoices):
    HEARTBEAT = "heartbeat", _("No report within a timeout")
    XID = "xid", _("Critical XID error")
    ECC_UNCORRECTABLE = "ecc_uncorrectable", _("Uncorrectable ECC errors")
    GPU_LOST = "gpu_lost", _("GPU lost")


# XIDs of a fault in the GPU, its memory or its links, never of the program running on it
# (NVIDIA's XID catalogue): double-bit ECC (48), row remapping (63, 64), NVLink (74), fallen off
# the bus (79), contained and uncontained ECC (94, 95), on which the default rule cordons; and a
# high single-bit ECC rate (92), on which no rule acts by itself.
CRITICAL_XIDS = (48, 63, 64, 74, 79, 94, 95)
HARDWARE_XIDS = frozenset({*CRITICAL_XIDS, 92})
