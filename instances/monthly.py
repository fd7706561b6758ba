"""Monthly (包月) rental of whole nodes: each 30-day period is prepaid from the balance when the
node is placed and at each renewal, under the ledger key monthly:{instance}:{period}; the node
stays reserved while the instance is stopped; at the period's end the rental renews, or ends as
the user chose (or when the balance cannot pay): the instance is stopped, the node freed, and a
later start is billed by the minute."""

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing.choices import TransactionKind
from billing.services import ledger_post
from instances.choices import BillingMode, InstanceStatus
from instances.models import Instance, InstanceEvent
from starverse.core.text import later

logger = logging.getLogger(__name__)
PERIOD = timedelta(days=30)
S = InstanceStatus


def period_active(instance: Instance) -> bool:
    """A monthly rental whose prepaid period runs: its node stays reserved, even stopped."""
    return (
        instance.billing == BillingMode.MONTHLY
        and instance.paid_until is not None
        and instance.paid_until > timezone.now()
    )


def period_charge(instance: Instance, *, now: Any = None) -> None:
    """Prepay the next period (raises InsufficientBalance). Call with the row locked."""
    now = now or timezone.now()
    period = instance.monthly_period + 1
    price = instance.offering.price_per_month_fen
    txn = ledger_post(
        wallet_id=instance.tenant.wallet.id,
        key=f"monthly:{instance.id}:{period}",
        kind=TransactionKind.USAGE,
        amount_fen=-price,
        instance_id=instance.id,
        description=gettext_noop("Monthly rental"),
    )
    start = max(instance.paid_until or now, now)
    instance.monthly_period, instance.paid_until = period, start + PERIOD
    instance.cost_fen += -txn.amount_fen
    Instance.objects.filter(pk=instance.pk).update(
        monthly_period=period, paid_until=instance.paid_until, cost_fen=instance.cost_fen
    )
    InstanceEvent.objects.create(
        instance=instance,
        status=instance.status,
        message=later("Monthly period %(n)d paid until %(until)s.")
        % {"n": period, "until": timezone.localtime(instance.paid_until).strftime("%Y-%m-%d")},
    )


def renewals_run(*, now: Any = None) -> tuple[list[str], list[str]]:
    """Renew or end every monthly rental whose period is over. Returns (renewed, ended)."""
    from instances.lifecycle import _locked, instance_transition
    from starverse.core.errors import InsufficientBalance

    now = now or timezone.now()
    renewed, ended = [], []
    due = (
        Instance.objects.filter(billing=BillingMode.MONTHLY, paid_until__lte=now)
        .exclude(status__in=(S.TERMINATING, S.TERMINATED))
        .values_list("id", flat=True)
    )
    for instance_id in due:
        with transaction.atomic():
            instance = _locked(instance_id)
            if instance.billing != BillingMode.MONTHLY or instance.paid_until > now:
                continue
            if instance.auto_renew:
                try:
                    period_charge(instance, now=now)
                except InsufficientBalance:
                    reason = later("the balance could not pay the next month")
                else:
                    renewed.append(instance.id)
                    continue
            else:
                reason = later("you chose not to renew")
            instance.billing = BillingMode.HOURLY
            instance.save(update_fields=["billing"])
            message = later(
                "Monthly rental ended: %(reason)s. The instance is stopped and its disk "
                "kept; starting it again is billed by the minute."
            ) % {"reason": reason}
            if instance.status in (S.RUNNING, S.PROVISIONING):
                instance_transition(instance, S.STOPPING, message, running_since=None)
                from instances.tasks import stop_instance

                transaction.on_commit(lambda i=instance.id: stop_instance.delay(i))
            elif instance.status == S.STOPPED and instance.allocations.exists():
                release_reservation(instance, message)
            ended.append(instance.id)
    if renewed or ended:
        logger.info("monthly.renewals renewed=%s ended=%s", renewed, ended)
    return renewed, ended


def release_reservation(instance: Instance, message: str) -> None:
    """Free the node a stopped monthly rental was keeping, and serve the queue."""
    from instances.placement import release
    from instances.tasks import drain_queue

    release(instance)
    InstanceEvent.objects.create(instance=instance, status=instance.status, message=message)
    product = instance.offering.gpu_model.product
    transaction.on_commit(lambda: drain_queue.delay(product))
