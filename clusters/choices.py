from django.db import models
from django.utils.translation import gettext_lazy as _

from instances.choices import InstanceStatus


class Template(models.TextChoices):
    TORCHRUN = "torchrun", _("torchrun (PyTorch)")
    DEEPSPEED = "deepspeed", _("DeepSpeed")
    MEGATRON = "megatron", _("Megatron-LM")
    COLOSSALAI = "colossalai", _("Colossal-AI")
    NONE = "none", _("None")


class ClusterStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    PROVISIONING = "provisioning", _("Provisioning")
    CHECKING = "checking", _("Checking")
    RUNNING = "running", _("Running")
    STOPPING = "stopping", _("Stopping")
    STOPPED = "stopped", _("Stopped")
    TERMINATING = "terminating", _("Terminating")
    TERMINATED = "terminated", _("Terminated")
    FAILED = "failed", _("Failed")


R, C = InstanceStatus, ClusterStatus


def status_of(ranks: list[str]) -> str:
    """A cluster's status from its ranks' (the instance state machine moves each rank; the
    cluster is their aggregate). The first rule that matches wins: any rank terminating, all
    terminated, any failed, any queued (ranks queue together, and a rank that moves waits
    queued), any stopping, all stopped, all running, all checking (up, the pre-flight check
    running: not billed); anything else is on its way up (provisioning)."""
    found = set(ranks)
    if not found:
        return C.QUEUED
    if R.TERMINATING in found:
        return C.TERMINATING
    if found == {R.TERMINATED}:
        return C.TERMINATED
    for rank, cluster in ((R.FAILED, C.FAILED), (R.QUEUED, C.QUEUED), (R.STOPPING, C.STOPPING)):
        if rank in found:
            return cluster
    if found == {R.STOPPED}:
        return C.STOPPED
    if found == {R.RUNNING}:
        return C.RUNNING
    if found == {R.CHECKING}:
        return C.CHECKING
    return C.PROVISIONING
