"""What a spot instance (or a spot cluster's rank) taken back for a paying order does
(compute.preemption calls preempted, registered for both kinds of holding): billing stops now,
it stops with its disk kept and `stop_reason: "preempted"`, its timeline and its owner (the
`instance.preempted` event, by e-mail through the default channel) are told, and its pod gets
the notice when it is deleted (instances.provisioning.converge: the deadline in
/etc/starverse/preempt, then SIGTERM through the pod's graceful deletion, SIGKILL at the
deadline). A cluster's ranks are taken back together (the whole gang is one unit of the
preemption), so the cluster stops as a whole."""

import logging
from datetime import datetime

from django.utils import timezone

from compute.choices import HoldingKind
from compute.preemption import preemption_hooks_register
from events.choices import EventType
from events.emit import emit_about
from instances.choices import InstanceStatus
from instances.states import instance_locked, instance_mark_stopping
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus
PREEMPTED = "preempted"
# what may be taken back: it holds GPUs and is not already on its way out
_TAKEABLE = (S.PROVISIONING, S.CHECKING, S.RUNNING)


def preempted(instance_ids: list[str], deadline: datetime) -> None:
    """Stop these spot instances (in the caller's transaction, which holds the GPU model's
    placement lock), telling each why and until when its container may run."""
    at = timezone.localtime(timezone.now()).strftime("%Y-%m-%d %H:%M:%S")
    until = timezone.localtime(deadline).strftime("%Y-%m-%d %H:%M:%S")
    for instance_id in sorted(instance_ids):
        instance = instance_locked(instance_id)
        if instance.status not in _TAKEABLE:
            continue
        instance.stop_reason = PREEMPTED
        instance.save(update_fields=["stop_reason"])
        message = later(
            "Taken back for a paying order (an interruptible rental). Billing stopped at "
            "%(at)s; the container has until %(deadline)s (SIGTERM now, the deadline in "
            "/etc/starverse/preempt), then its GPUs are taken. The disk is kept: start it "
            "again when GPUs are free."
        ) % {"at": at, "deadline": until}
        instance_mark_stopping(instance, message)
        emit_about(instance, EventType.INSTANCE_PREEMPTED, deadline=deadline.isoformat())
        logger.info("spot.preempted instance=%s deadline=%s", instance_id, deadline)


def preemption_hooks_install() -> None:
    """Called from InstancesConfig.ready: instances and clusters' ranks are instances."""
    preemption_hooks_register(HoldingKind.INSTANCE, preempted)
    preemption_hooks_register(HoldingKind.RANK, preempted)
