"""Monthly (包月) rental of whole nodes: each 30-day period is prepaid from the balance when the
node is placed and at each renewal, under the ledger key monthly:{instance}:{period}
(instances.charges); the node stays reserved while the instance is stopped; at the period's end
the rental renews, or ends as the user chose, when the balance cannot pay, or when its orderer's
or its team's monthly budget does not fit the next month (instances.admission.renewal_refusal,
the rule orders pass; the team's owners are mailed): the instance is stopped, the node freed,
and a later start is billed by the minute."""

import logging
from datetime import datetime
from typing import NamedTuple

from django.db import transaction
from django.utils import timezone

from billing.notices import mail_about_instance
from compute.choices import BillingMode
from compute.holdings import holding_billing_set, holds_gpus
from instances.admission import renewal_refusal
from instances.charges import period_charge
from instances.choices import InstanceStatus
from instances.models import Instance, InstanceEvent
from instances.states import gpus_release, instance_locked, instance_mark_stopping
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import InsufficientBalance
from starverse.core.text import Deferred, later

logger = logging.getLogger(__name__)
S = InstanceStatus
_ENDED = later(
    "Monthly rental ended: %(reason)s. The instance is stopped and its disk kept; "
    "starting it again is billed by the minute."
)


class Ending(NamedTuple):
    """Why a rental ends at its paid month: its timeline line, and whether a budget ended it
    (then the team's owners are mailed, who can raise it)."""

    message: Deferred
    over_budget: bool = False


def renewals_run(*, now: datetime | None = None) -> tuple[list[str], list[str]]:
    """Renew or end every monthly rental whose period is over. Returns (renewed, ended)."""
    now = now or timezone.now()
    renewed, ended = [], []
    due = (
        Instance.objects.filter(billing=BillingMode.MONTHLY, monthly__paid_until__lte=now)
        .exclude(status__in=(S.TERMINATING, S.TERMINATED))
        .values_list("id", flat=True)
    )
    for instance_id in due:
        with transaction.atomic():
            instance = instance_locked(instance_id)
            # checked again under the lock; as in the query (paid_until__lte), NULL is not due
            rental = instance.rental
            if (
                instance.billing != BillingMode.MONTHLY
                or rental is None
                or rental.paid_until is None
                or rental.paid_until > now
            ):
                continue
            ending = _renew(instance, now=now)
            if ending is None:
                renewed.append(instance.id)
                continue
            event = _rental_end(instance, ending.message)
            if ending.over_budget:
                enqueue_on_commit("instances.tasks.send_rental_not_renewed", event.pk)
            ended.append(instance.id)
    if renewed or ended:
        logger.info("monthly.renewals renewed=%s ended=%s", renewed, ended)
    return renewed, ended


def _renew(instance: Instance, *, now: datetime) -> Ending | None:
    """Pay the next period of a rental that renews, if its orderer's and its team's monthly
    budgets fit it as they would an order of it. None when paid; otherwise why it ends."""
    rental = instance.rental
    if rental is not None and not rental.auto_renew:
        return Ending(_ENDED % {"reason": later("you chose not to renew")})
    refusal = renewal_refusal(instance, now=now)
    if refusal is not None:
        return Ending(refusal, over_budget=True)
    try:
        period_charge(instance, now=now)
    except InsufficientBalance:
        return Ending(_ENDED % {"reason": later("the balance could not pay the next month")})
    return None


def _rental_end(instance: Instance, message: str) -> InstanceEvent:
    """End a (locked) monthly rental: a running or starting instance is stopped with its disk
    kept, a stopped one gives back the node it kept; from now on it is billed by the minute.
    Its timeline says why (`message`) whatever state it is in; returns that line."""
    if instance.status in (S.RUNNING, S.CHECKING, S.PROVISIONING):
        # still billed monthly here, so stopping charges no minutes
        instance_mark_stopping(instance, message)
    elif instance.status == S.STOPPED and holds_gpus(instance.id):
        release_reservation(instance, message)
    else:
        InstanceEvent.objects.create(instance=instance, status=instance.status, message=message)
    instance.billing = BillingMode.HOURLY
    instance.save(update_fields=["billing"])
    holding_billing_set(instance.id, BillingMode.HOURLY)
    return instance.events.order_by("-at", "-id")[0]


def release_reservation(instance: Instance, message: str) -> None:
    """Free the node a stopped monthly rental was keeping, and serve the queue."""
    gpus_release(instance)
    InstanceEvent.objects.create(instance=instance, status=instance.status, message=message)


def rental_not_renewed_notice_send(*, event_id: int) -> None:
    """Mail whoever rented the instance and the team's owners and admins the timeline line
    saying which budget ended its monthly rental, in both languages."""
    event = InstanceEvent.objects.select_related("instance").filter(pk=event_id).first()
    if event is None:  # the instance was deleted since
        return
    instance = event.instance
    mail_about_instance(
        instance.tenant_id,
        instance.created_by_id,
        "instances/email/rental_not_renewed.txt",
        {"instance_name": instance.name, "instance_id": instance.pk, "event": event},
    )
    logger.info("monthly.not_renewed_notice instance=%s event=%s", instance.pk, event_id)
