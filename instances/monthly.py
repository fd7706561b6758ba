"""Monthly (包月) rental of whole nodes: each 30-day period is prepaid from the balance when the
node is placed and at each renewal, under the ledger key monthly:{instance}:{period}
(instances.charges); the node stays reserved while the instance is stopped; at the period's end
the rental renews, or ends as the user chose (or when the balance cannot pay): the instance is
stopped, the node freed, and a later start is billed by the minute."""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from instances.charges import period_charge
from instances.choices import BillingMode, InstanceStatus
from instances.models import Instance, InstanceEvent
from instances.states import gpus_release, instance_locked, instance_mark_stopping
from starverse.core.errors import InsufficientBalance
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus


def renewals_run(*, now: datetime | None = None) -> tuple[list[str], list[str]]:
    """Renew or end every monthly rental whose period is over. Returns (renewed, ended)."""
    now = now or timezone.now()
    renewed, ended = [], []
    due = (
        Instance.objects.filter(billing=BillingMode.MONTHLY, paid_until__lte=now)
        .exclude(status__in=(S.TERMINATING, S.TERMINATED))
        .values_list("id", flat=True)
    )
    for instance_id in due:
        with transaction.atomic():
            instance = instance_locked(instance_id)
            # checked again under the lock; as in the query (paid_until__lte), NULL is not due
            if (
                instance.billing != BillingMode.MONTHLY
                or instance.paid_until is None
                or instance.paid_until > now
            ):
                continue
            ends_because = _renew(instance, now=now)
            if ends_because is None:
                renewed.append(instance.id)
                continue
            _rental_end(instance, ends_because)
            ended.append(instance.id)
    if renewed or ended:
        logger.info("monthly.renewals renewed=%s ended=%s", renewed, ended)
    return renewed, ended


def _renew(instance: Instance, *, now: datetime) -> str | None:
    """Pay the next period of a rental that renews. None when paid; otherwise why it ends."""
    if not instance.auto_renew:
        return later("you chose not to renew")
    try:
        period_charge(instance, now=now)
    except InsufficientBalance:
        return later("the balance could not pay the next month")
    return None


def _rental_end(instance: Instance, reason: str) -> None:
    """End a (locked) monthly rental: a running or starting instance is stopped with its disk
    kept, a stopped one gives back the node it kept; from now on it is billed by the minute."""
    message = later(
        "Monthly rental ended: %(reason)s. The instance is stopped and its disk kept; "
        "starting it again is billed by the minute."
    ) % {"reason": reason}
    if instance.status in (S.RUNNING, S.CHECKING, S.PROVISIONING):
        # still billed monthly here, so stopping charges no minutes
        instance_mark_stopping(instance, message)
    elif instance.status == S.STOPPED and instance.allocations.exists():
        release_reservation(instance, message)
    instance.billing = BillingMode.HOURLY
    instance.save(update_fields=["billing"])


def release_reservation(instance: Instance, message: str) -> None:
    """Free the node a stopped monthly rental was keeping, and serve the queue."""
    gpus_release(instance)
    InstanceEvent.objects.create(instance=instance, status=instance.status, message=message)
