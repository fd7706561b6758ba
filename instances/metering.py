"""Per-minute billing of running instances and cluster ranks, as the compute core's meter
(compute.metering) accrues it: the meter holds each closed minute against the wallet and posts
a holding's minutes by the hour. This module is what instances hear of it (registered from
instances.apps): the fen accrued, added to each instance's cost, and the instances whose
balance could not pay a minute, stopped (not deleted; a cluster's rank stops its cluster
whole). The tick also stops what a member's or a team's spent budget no longer allows."""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone
from django.utils.translation import gettext_noop

from compute.choices import HoldingKind
from compute.metering import MeterHooks, meter_hooks_register, meter_tick
from events.choices import EventType
from events.emit import emit
from instances.budgets import budgets_spent
from instances.choices import InstanceStatus
from instances.lifecycle import instance_stop
from instances.models import Instance
from instances.signals import gang_over_budget
from starverse.accounts.models import Tenant, User
from starverse.core.db import bulk_set
from starverse.core.errors import Conflict

logger = logging.getLogger(__name__)


@dataclass
class TickResult:
    charged_minutes: int = 0
    charged_fen: int = 0
    exhausted: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)


def _budget_words(tenant_id: str, user_id: str | None) -> dict[str, object]:
    """What `budget.reached` says: the team's budget, or a member's (named by address)."""
    team = Tenant.objects.only("name").get(pk=tenant_id).name
    member = User.objects.filter(pk=user_id).values_list("email", flat=True).first()
    return {
        "id": tenant_id,
        "name": f"{team} / {member}" if member else team,
        "team": team,
        "user": user_id,
        "url": "/teams/",
    }


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
        before = len(stopped)
        for instance_id, gang in running.values_list("pk", "holding__gang"):
            try:
                instance_stop(
                    instance_id=instance_id,
                    reason=gettext_noop("Budget spent: stopped (not deleted); disks kept."),
                    by_owner=True,  # its cluster stops whole: below
                )
            except Conflict:  # it left running meanwhile
                continue
            stopped.append(instance_id)
            if gang and gang not in clusters:
                clusters.add(gang)
                # a cluster stops whole: its ranks still starting or checking too (the
                # clusters app, above this one, hears it)
                gang_over_budget.send(sender=Instance, gang=gang)
        if len(stopped) > before:  # reported when it stops something, so once a spell
            emit(tenant_id, EventType.BUDGET_REACHED, _budget_words(tenant_id, user_id))
    if stopped:
        logger.info("metering.budget_stops instances=%d", len(stopped))
    return stopped


def metering_tick(*, now: datetime | None = None) -> TickResult:
    """One tick of the meter over every metering holding (instances, ranks, endpoint
    replicas): closed minutes accrued, hours posted, the unpaid stopped; then the budgets."""
    now = now or timezone.now()
    metered = meter_tick(now=now)
    result = TickResult(charged_minutes=metered.minutes, charged_fen=metered.fen)
    result.exhausted = [
        holding
        for kind in (HoldingKind.INSTANCE, HoldingKind.RANK)
        for holding in metered.short.get(kind, [])
    ]
    result.over_budget = budgets_enforce(now=now)
    return result


def _costs_add(accrued: dict[str, int]) -> None:
    """Once the meter's money has committed: what each instance's minutes cost, added to it."""
    bulk_set(Instance, [(i, fen) for i, fen in accrued.items() if fen], ["cost_fen"], add=True)


def _exhausted_stop(_accrued: dict[str, int], short: list[str]) -> None:
    """After the meter's transaction: the instances whose balance could not pay a minute."""
    for instance_id in short:
        try:
            instance_stop(
                instance_id=instance_id,
                reason=gettext_noop("Balance exhausted: stopped (not deleted); disks kept."),
                by_owner=True,  # the platform's stop: the wallet could not pay this rank
            )
        except Conflict:  # it left running meanwhile
            continue


def meter_hooks_install() -> None:
    """From InstancesConfig.ready: instances and ranks are metered holdings."""
    hooks = MeterHooks(accrued=_costs_add, after=_exhausted_stop)
    meter_hooks_register(HoldingKind.INSTANCE, hooks)
    meter_hooks_register(HoldingKind.RANK, hooks)
