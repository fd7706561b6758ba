"""Per-minute billing of running instances. Each closed minute of a usage session is charged
once, under the ledger key usage:{instance}:{session}:{minute}; a tick that runs twice, late or
concurrently charges nothing twice and catches up on what it missed. A charge the balance
cannot pay takes what is left and stops the instance."""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing.services import usage_post_many
from instances.charges import closed_minutes, usage_charges
from instances.choices import BillingMode, InstanceStatus
from instances.lifecycle import instance_stop
from instances.models import Instance
from instances.states import instances_locked_skipping
from starverse.core.db import bulk_set

logger = logging.getLogger(__name__)
MAX_CATCH_UP_MINUTES = 24 * 60


@dataclass
class TickResult:
    charged_minutes: int = 0
    charged_fen: int = 0
    exhausted: list[str] = field(default_factory=list)


def metering_tick(*, now: datetime | None = None) -> TickResult:
    """Charge every running hourly instance its closed minutes (at most a day's worth a tick),
    then stop those whose balance could not pay."""
    now = now or timezone.now()
    result = TickResult()
    with transaction.atomic():
        running = list(_running_hourly())
        billed = _charge_closed_minutes(running, now, result)
        bulk_set(
            Instance,
            [(i.pk, i.billed_minutes, i.cost_fen) for i in billed],
            ["billed_minutes", "cost_fen"],
        )
    for instance_id in result.exhausted:
        instance_stop(
            instance_id=instance_id,
            reason=gettext_noop("Balance exhausted: stopped (not deleted); disks kept."),
        )
    logger.info(
        "metering.tick instances=%d minutes=%d fen=%d exhausted=%d",
        len(running),
        result.charged_minutes,
        result.charged_fen,
        len(result.exhausted),
    )
    return result


def _running_hourly() -> QuerySet[Instance]:
    # skipping locked rows: a concurrent tick leaves these to us (single flight per instance)
    return instances_locked_skipping(
        Instance.objects.select_related("offering", "tenant__wallet").filter(
            status=InstanceStatus.RUNNING,
            running_since__isnull=False,
            billing=BillingMode.HOURLY,
        )
    )


def _charge_closed_minutes(
    running: list[Instance], now: datetime, result: TickResult
) -> list[Instance]:
    """Post the unbilled closed minutes of every locked running instance in one batch; returns
    the instances whose billed minutes and cost moved, updated in memory."""
    charges, plan = [], []
    for instance in running:
        upto = min(closed_minutes(instance, now), instance.billed_minutes + MAX_CATCH_UP_MINUTES)
        mine = usage_charges(instance, upto)
        charges += mine
        plan.append((instance, upto, [(c["key"], c["amount_fen"]) for c in mine]))
    charged = usage_post_many(charges)
    billed = []
    for instance, upto, keys in plan:
        if upto <= instance.billed_minutes:
            continue
        spent = sum(charged[key] for key, _amount in keys)
        result.charged_minutes += upto - instance.billed_minutes
        result.charged_fen += spent
        # the rows are locked by this transaction, so absolute values are safe here
        instance.billed_minutes, instance.cost_fen = upto, instance.cost_fen + spent
        billed.append(instance)
        if any(charged[key] < amount for key, amount in keys):
            result.exhausted.append(instance.id)
    return billed
