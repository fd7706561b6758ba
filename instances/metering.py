"""Per-minute billing of running instances. Each closed minute of a usage session is charged
once, under the ledger key usage:{instance}:{session}:{minute}; a tick that runs twice, late or
concurrently charges nothing twice and catches up on what it missed. A charge the balance
cannot pay takes what is left and stops the instance."""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing.services import minute_charge_fen, usage_post_many
from instances.choices import BillingMode, InstanceStatus
from instances.models import Instance
from starverse.core.db import bulk_set

logger = logging.getLogger(__name__)
MAX_CATCH_UP_MINUTES = 24 * 60


@dataclass
class TickResult:
    charged_minutes: int = 0
    charged_fen: int = 0
    exhausted: list[str] = field(default_factory=list)


def closed_minutes(instance: Instance, now: datetime) -> int:
    if instance.running_since is None:
        return 0
    return max(0, int((now - instance.running_since).total_seconds() // 60))


def _charges(instance: Instance, upto: int) -> list[dict]:
    """The usage charge of each unbilled minute up to `upto`, keyed per (instance, minute)."""
    charges = []
    for minute in range(instance.billed_minutes + 1, upto + 1):
        amount = minute_charge_fen(instance.offering.price_per_hour_fen, minute)
        if amount > 0:
            charges.append(
                {
                    "wallet_id": instance.tenant.wallet.id,
                    "key": f"usage:{instance.id}:{instance.session}:{minute}",
                    "amount_fen": amount,
                    "instance_id": instance.id,
                    "description": gettext_noop("GPU usage"),
                }
            )
    return charges


def metering_tick(*, now: datetime | None = None) -> TickResult:
    now = now or timezone.now()
    result = TickResult()
    with transaction.atomic():
        # skip_locked: a concurrent tick leaves these rows to us (single flight per instance).
        running = list(
            Instance.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("offering", "tenant__wallet")
            .filter(
                status=InstanceStatus.RUNNING,
                running_since__isnull=False,
                billing=BillingMode.HOURLY,
            )
        )
        charges, plan = [], {}
        for instance in running:
            upto = min(
                closed_minutes(instance, now), instance.billed_minutes + MAX_CATCH_UP_MINUTES
            )
            mine = _charges(instance, upto)
            charges += mine
            plan[instance.id] = (instance, upto, [(c["key"], c["amount_fen"]) for c in mine])
        charged = usage_post_many(charges)
        billed: list[Instance] = []
        for instance, upto, keys in plan.values():
            if upto <= instance.billed_minutes:
                continue
            spent = sum(charged[key] for key, _amount in keys)
            short = any(charged[key] < amount for key, amount in keys)
            result.charged_minutes += upto - instance.billed_minutes
            result.charged_fen += spent
            # the rows are locked by this transaction, so absolute values are safe here
            instance.billed_minutes, instance.cost_fen = upto, instance.cost_fen + spent
            billed.append(instance)
            if short:
                result.exhausted.append(instance.id)
        bulk_set(
            Instance,
            [(i.pk, i.billed_minutes, i.cost_fen) for i in billed],
            ["billed_minutes", "cost_fen"],
        )
    for instance_id in result.exhausted:
        _stop_for_balance(instance_id)
    logger.info(
        "metering.tick instances=%d minutes=%d fen=%d exhausted=%d",
        len(running),
        result.charged_minutes,
        result.charged_fen,
        len(result.exhausted),
    )
    return result


def bill_until(instance: Instance, now: datetime, *, started_minute: bool) -> int:
    """Charge the instance's unbilled minutes up to `now` (with the minute in progress when
    `started_minute`), inside the caller's transaction that holds its row lock."""
    if instance.running_since is None or instance.billing != BillingMode.HOURLY:
        return 0
    elapsed = (now - instance.running_since).total_seconds()
    upto = int(-(-elapsed // 60)) if started_minute else int(elapsed // 60)
    charges = _charges(instance, upto)
    keys = [c["key"] for c in charges]
    if upto <= instance.billed_minutes:
        return 0
    charged = usage_post_many(charges)
    spent = sum(charged[key] for key in keys)
    Instance.objects.filter(pk=instance.pk).update(
        billed_minutes=upto, cost_fen=F("cost_fen") + spent
    )
    return spent


def _stop_for_balance(instance_id: str) -> None:
    from instances.lifecycle import instance_stop

    instance_stop(
        instance_id=instance_id,
        reason=gettext_noop("Balance exhausted: stopped (not deleted); disks kept."),
    )
