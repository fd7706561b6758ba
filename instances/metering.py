"""Per-minute billing of running instances. Each closed minute of a usage session is charged
once, under the ledger key usage:{instance}:{session}:{minute}; a tick that runs twice, late or
concurrently charges nothing twice and catches up on what it missed. A minute of an offering
with a trial price is paid from trial credit at that price while the trial credit covers it,
then from cash at the standard price (billing.services.usage_post_many). A charge the cash
cannot pay takes what is left and stops the instance."""

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing.services import usage_post_many
from compute.choices import BillingMode
from instances.budgets import budgets_spent
from instances.charges import minute_charges
from instances.choices import InstanceStatus
from instances.lifecycle import instance_stop
from instances.models import Instance
from instances.signals import cluster_over_budget
from instances.states import instances_locked_skipping
from starverse.core.db import bulk_set
from starverse.core.errors import Conflict

logger = logging.getLogger(__name__)
MAX_CATCH_UP_MINUTES = 24 * 60


@dataclass
class TickResult:
    charged_minutes: int = 0
    charged_fen: int = 0
    exhausted: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)


def budgets_enforce(*, now: datetime | None = None) -> list[str]:
    """Stop the running instances of every member (or team) whose monthly budget is spent,
    the way an empty wallet stops them: not deleted, disks kept; a cluster with a rank among
    them stops whole. Returns their ids."""
    stopped: list[str] = []
    clusters: set[str] = set()
    for tenant_id, user_id in budgets_spent(now=now):
        running = Instance.objects.filter(tenant_id=tenant_id, status=InstanceStatus.RUNNING)
        if user_id is not None:
            running = running.filter(created_by_id=user_id)
        for instance_id, cluster_id in running.values_list("pk", "cluster_id"):
            try:
                instance_stop(
                    instance_id=instance_id,
                    reason=gettext_noop("Budget spent: stopped (not deleted); disks kept."),
                    for_cluster=True,  # its cluster stops whole: below
                )
            except Conflict:  # it left running meanwhile
                continue
            stopped.append(instance_id)
            if cluster_id and cluster_id not in clusters:
                clusters.add(cluster_id)
                # a cluster stops whole: its ranks still starting or checking too (the
                # clusters app, above this one, hears it)
                cluster_over_budget.send(sender=Instance, cluster_id=cluster_id)
    if stopped:
        logger.info("metering.budget_stops instances=%d", len(stopped))
    return stopped


def metering_tick(*, now: datetime | None = None) -> TickResult:
    """Charge every running hourly instance its closed minutes (at most a day's worth a tick),
    then stop those whose balance could not pay."""
    now = now or timezone.now()
    result = TickResult()
    with transaction.atomic():
        running = list(_running_hourly())
        billed = _charge_closed_minutes(running, now, result)
        bulk_set(Instance, billed, ["billed_minutes", "cost_fen"])
    for instance_id in result.exhausted:
        instance_stop(
            instance_id=instance_id,
            reason=gettext_noop("Balance exhausted: stopped (not deleted); disks kept."),
            for_cluster=True,  # the platform's stop: the wallet could not pay this rank
        )
    result.over_budget = budgets_enforce(now=now)
    logger.info(
        "metering.tick instances=%d minutes=%d fen=%d exhausted=%d",
        len(running),
        result.charged_minutes,
        result.charged_fen,
        len(result.exhausted),
    )
    return result


# What the tick reads of each running instance: plain rows, not model objects (a tick of
# 100,000 instances spent most of its time building them).
_RUNNING_COLUMNS = (
    "id",
    "session",
    "billed_minutes",
    "cost_fen",
    "running_since",
    "offering__price_per_hour_fen",
    "offering__trial_price_per_hour_fen",
    "tenant__wallet__id",
)


def _running_hourly() -> QuerySet[Instance, tuple[Any, ...]]:
    # skipping locked rows: a concurrent tick leaves these to us (single flight per instance)
    return instances_locked_skipping(
        Instance.objects.filter(
            status=InstanceStatus.RUNNING,
            running_since__isnull=False,
            billing=BillingMode.HOURLY,
        )
    ).values_list(*_RUNNING_COLUMNS)


def _charge_closed_minutes(
    running: list[tuple[Any, ...]], now: datetime, result: TickResult
) -> list[tuple[str, int, int]]:
    """Post the unbilled closed minutes of every locked running instance in one batch; returns
    (id, billed minutes, cost) of the instances whose billed minutes and cost moved."""
    charges, plan = [], []
    for instance_id, session, billed, cost, running_since, price, trial, wallet_id in running:
        closed = max(0, int((now - running_since).total_seconds() // 60))
        upto = min(closed, billed + MAX_CATCH_UP_MINUTES)
        if upto <= billed:
            continue
        mine = minute_charges(
            instance_id=instance_id,
            session=session,
            wallet_id=wallet_id,
            price_per_hour_fen=price,
            trial_price_per_hour_fen=trial,
            billed=billed,
            upto=upto,
        )
        charges += mine
        plan.append((instance_id, billed, cost, upto, [c["key"] for c in mine]))
    charged = usage_post_many(charges)
    moved = []
    for instance_id, billed, cost, upto, keys in plan:
        spent = sum(charged[key].fen for key in keys)
        result.charged_minutes += upto - billed
        result.charged_fen += spent
        # the rows are locked by this transaction, so absolute values are safe here
        moved.append((instance_id, upto, cost + spent))
        if any(charged[key].short for key in keys):
            result.exhausted.append(instance_id)
    return moved
