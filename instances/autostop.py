"""Automatic stops, every minute: instances idle for their set time (every GPU below the
threshold, read from the node agents' samples), warned first, and instances whose scheduled
stop is due. Both stop through instances.lifecycle.instance_stop, as the console's Stop does,
and record an AutoStop from which the money they saved is read.

Idle means: every GPU the instance holds reported within the last FRESH, and every sample of
every GPU since the idle time began is below the threshold. A sample without a utilisation
reading counts as busy, and a GPU without samples (a silent agent) is never idle: the node
health rules deal with that. The idle time begins at the latest of: the last busy sample, the
start of the instance's running, the owner's last Keep running or change of the setting, and
the first sample of the window (a window's first sample may come up to SAMPLE_SLACK after its
start). A cluster's ranks are left out: a cluster stops as a whole (clusters)."""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from compute.choices import BillingMode
from compute.models import Allocation
from events.choices import EventType
from events.emit import emit_about
from fleet.models import Gpu, GpuSample
from instances.charges import period_active
from instances.choices import AutoStopKind, InstanceStatus
from instances.lifecycle import instance_stop
from instances.models import AutoStop, Instance, InstanceEvent, StopPolicy
from instances.schedules import IdleStop
from instances.states import instance_locked
from starverse.accounts.models import IDLE_MINUTES_RANGE
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus
FRESH = timedelta(minutes=2)
SAMPLE_SLACK = timedelta(minutes=1)
SAVED_CAP = timedelta(hours=24)
# The longest idle time an instance can be given (and raw samples are kept a day): no window
# reaches further back.
LOOKBACK = timedelta(minutes=IDLE_MINUTES_RANGE[1])
STOPPABLE = (S.RUNNING, S.CHECKING, S.PROVISIONING)


@dataclass
class AutoStopRun:
    warned: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Idle:
    """One candidate as the scan read it: since when it has been idle (None: it is not)."""

    instance_id: str
    tenant_id: str
    idle: IdleStop
    warn_minutes: int
    idle_from: datetime | None
    warned_at: datetime | None
    due_at: datetime | None


def _gpu_rows(now: datetime) -> list[dict[str, Any]]:
    """One row per GPU of every candidate (a running instance with an idle stop, not a cluster's
    rank), in one query, with three index probes per GPU: its last busy sample in the window,
    its first sample in the window, and its newest sample. The window begins at the latest of
    the start of the running, the idle count's start and LOOKBACK ago. The busy probe reads the
    GPU's samples newest first and stops at the first busy one, so a busy GPU costs one row and
    an idle one reads back to the start of its idle spell, which the stop itself keeps short."""
    window_start = Greatest(
        F("holding__instance__running_since"),
        Coalesce(
            F("holding__instance__stop_policy__idle_counted_from"),
            F("holding__instance__running_since"),
        ),
        Value(now - LOOKBACK),
    )
    # the GPU's id first, so that each probe is a plain range of the (gpu, at) index that it
    # reads in order and leaves at its first row (through a join it would sort the window)
    gpu = Gpu.objects.filter(node_id=OuterRef("node_id"), index=OuterRef("gpu_index")).order_by()
    samples = GpuSample.objects.filter(gpu_id=OuterRef("gpu_pk"), at__lte=now)
    in_window = samples.filter(at__gte=OuterRef("window_start"))
    busy = in_window.filter(
        Q(util__isnull=True)
        | Q(util__gte=OuterRef("holding__instance__stop_policy__idle_stop_util_pct"))
    )
    rows: Any = (
        Allocation.objects.filter(
            holding__instance__status=S.RUNNING,
            holding__gang="",
            holding__instance__stop_policy__idle_stop_minutes__isnull=False,
            holding__instance__running_since__isnull=False,
        )
        .annotate(window_start=window_start, gpu_pk=Subquery(gpu.values("pk")[:1]))
        .annotate(
            last_busy=Subquery(busy.order_by("-at").values("at")[:1]),
            first_at=Subquery(in_window.order_by("at").values("at")[:1]),
            newest=Subquery(samples.order_by("-at").values("at")[:1]),
        )
        .values(
            "holding_id",
            "last_busy",
            "first_at",
            "newest",
            "holding__instance__tenant_id",
            "holding__instance__stop_policy__idle_stop_util_pct",
            "holding__instance__stop_policy__idle_stop_minutes",
            "holding__instance__stop_policy__idle_warn_minutes",
            "holding__instance__stop_policy__idle_warned_at",
            "holding__instance__stop_policy__idle_stop_due_at",
        )
        .order_by()
    )
    return list(rows)


def idle_candidates(now: datetime) -> list[_Idle]:
    """Every candidate with since when it has been idle, from one query."""
    gpus: dict[str, list[dict[str, Any]]] = {}
    for row in _gpu_rows(now):
        gpus.setdefault(row["holding_id"], []).append(row)
    found = []
    for instance_id, rows in gpus.items():
        first = rows[0]
        found.append(
            _Idle(
                instance_id=instance_id,
                tenant_id=first["holding__instance__tenant_id"],
                idle=IdleStop(
                    util_pct=first["holding__instance__stop_policy__idle_stop_util_pct"],
                    minutes=first["holding__instance__stop_policy__idle_stop_minutes"],
                ),
                warn_minutes=first["holding__instance__stop_policy__idle_warn_minutes"],
                idle_from=_idle_from(rows, now),
                warned_at=first["holding__instance__stop_policy__idle_warned_at"],
                due_at=first["holding__instance__stop_policy__idle_stop_due_at"],
            )
        )
    return found


def _idle_from(rows: list[dict[str, Any]], now: datetime) -> datetime | None:
    """Since when every GPU has been idle, or None: one GPU silent, or without a sample in the
    window, makes the instance not idle."""
    starts: list[datetime] = []
    for row in rows:
        if row["newest"] is None or row["newest"] < now - FRESH or row["first_at"] is None:
            return None
        starts.append(row["last_busy"] or row["first_at"])
    return max(starts)


def warn_after(idle: IdleStop, warn_minutes: int) -> timedelta:
    """How long idle before the warning: `warn_minutes` before the stop, but never before half
    the idle time (a 10-minute idle stop warns after 5)."""
    return timedelta(minutes=max(idle.minutes - warn_minutes, idle.minutes / 2))


def idle_run(*, now: datetime | None = None) -> AutoStopRun:
    """The idle auto-stop's minute: warn the instances idle for their warning time (once per
    idle spell), take the warning back from those busy again, and stop those idle for their
    whole time and warned (never without a warning: one that comes late, say after the beat
    was down, moves the stop to the warning's lead time from then). One query reads every
    candidate; only instances acted on cost more."""
    now = now or timezone.now()
    run = AutoStopRun()
    for found in idle_candidates(now):
        idle_for = now - found.idle_from if found.idle_from else timedelta(0)
        warned = found.warned_at is not None and (
            found.idle_from is not None and found.warned_at >= found.idle_from
        )
        if found.idle_from is None or idle_for < warn_after(found.idle, found.warn_minutes):
            if found.due_at is not None:  # busy again (or silent) after its warning
                run.cleared.append(found.instance_id)
        elif not warned:
            if _idle_warn(found, now=now):
                run.warned.append(found.instance_id)
        elif _stop_due(found, idle_for, now) and _idle_stop(found, now=now):
            run.stopped.append(found.instance_id)
    if run.cleared:
        # the banner goes; a new idle spell warns anew (one statement for all of them)
        StopPolicy.objects.filter(instance_id__in=run.cleared).update(idle_stop_due_at=None)
    return run


def _stop_due(found: _Idle, idle_for: timedelta, now: datetime) -> bool:
    """Idle its whole time (within a sample's slack), and the stop time the warning gave has
    come: never before it (the mail and the banner said "stops at"; the minute's beat makes it
    at most a minute late)."""
    if idle_for < _minutes(found.idle.minutes) - SAMPLE_SLACK:
        return False
    return found.due_at is None or now >= found.due_at


def _minutes(n: int) -> timedelta:
    return timedelta(minutes=n)


def _unchanged(found: _Idle) -> Q:
    """The instance's stop policy still as the scan read it: running, with the same idle stop,
    and its idle count not started again since (Keep running) — or the scan's decision no
    longer holds."""
    same = Q(
        instance_id=found.instance_id,
        instance__status=S.RUNNING,
        idle_stop_util_pct=found.idle.util_pct,
        idle_stop_minutes=found.idle.minutes,
    )
    if found.idle_from is not None:
        same &= Q(idle_counted_from__isnull=True) | Q(idle_counted_from__lte=found.idle_from)
    return same


def _idle_warn(found: _Idle, *, now: datetime) -> bool:
    """Warn once per idle spell: the row records it (the conditional update is what makes it
    once, with two workers too), then the timeline and an e-mail say when it stops."""
    assert found.idle_from is not None
    # the warning's lead time at least, even when the warning comes late (the beat was down)
    lead = min(timedelta(minutes=found.warn_minutes), _minutes(found.idle.minutes) / 2)
    due = max(found.idle_from + _minutes(found.idle.minutes), now + lead)
    with transaction.atomic():
        marked = (
            StopPolicy.objects.filter(_unchanged(found))
            .filter(Q(idle_warned_at__isnull=True) | Q(idle_warned_at__lt=found.idle_from))
            .update(idle_warned_at=now, idle_stop_due_at=due)
        )
        if not marked:
            return False
        instance = Instance.objects.get(pk=found.instance_id)
        words = {
            "minutes": int((now - found.idle_from).total_seconds() // 60),
            "pct": found.idle.util_pct,
            "at": timezone.localtime(due).strftime("%Y-%m-%d %H:%M"),
        }
        InstanceEvent.objects.create(
            instance=instance,
            status=instance.status,
            message=later(
                "Idle for %(minutes)s min (every GPU below %(pct)s %%): it stops at %(at)s "
                "unless it gets busy or you choose Keep running."
            )
            % words,
        )
        emit_about(instance, EventType.INSTANCE_IDLE_WARNING, stops_at=due.isoformat(), **words)
    logger.info("autostop.warned instance=%s due=%s", found.instance_id, due.isoformat())
    return True


def _idle_stop(found: _Idle, *, now: datetime) -> bool:
    with transaction.atomic():
        # under the row's lock: a Keep running that came after the scan read it wins
        instance_locked(found.instance_id)
        if not StopPolicy.objects.filter(_unchanged(found)).exists():
            return False
        message = later("Stopped: idle for %(minutes)s min (every GPU below %(pct)s %%).") % {
            "minutes": found.idle.minutes,
            "pct": found.idle.util_pct,
        }
        _auto_stop(found.instance_id, AutoStopKind.IDLE, message, now=now)
    logger.info("autostop.stopped instance=%s kind=idle", found.instance_id)
    return True


def _auto_stop(instance_id: str, kind: str, message: str, *, now: datetime) -> Instance:
    """Stop through the console's stop path and record what a running hour cost (nothing for a
    monthly rental in its paid month). The caller's transaction holds it all."""
    instance = instance_locked(instance_id)
    monthly = instance.billing == BillingMode.MONTHLY and period_active(instance)
    price = 0 if monthly else instance.offering.price_per_hour_fen
    instance = instance_stop(instance_id=instance_id, reason=message)
    policy = instance.stop_policy
    policy.stop_at, policy.idle_warned_at, policy.idle_stop_due_at = None, None, None
    policy.save(update_fields=["stop_at", "idle_warned_at", "idle_stop_due_at"])
    AutoStop.objects.create(
        instance=instance, tenant_id=instance.tenant_id, kind=kind, at=now, price_per_hour_fen=price
    )
    emit_about(instance, EventType.INSTANCE_AUTO_STOPPED, kind=kind)
    return instance


def schedules_run(*, now: datetime | None = None) -> list[str]:
    """Stop the instances whose scheduled stop is due; a schedule that comes due while the
    instance is not running (stopped, queued) is used up all the same. Returns the ids stopped."""
    now = now or timezone.now()
    stopped = []
    due = StopPolicy.objects.filter(stop_at__lte=now).values_list("instance_id", flat=True)
    for instance_id in list(due):
        with transaction.atomic():
            instance = instance_locked(instance_id)
            policy = instance.stop_policy
            if policy.stop_at is None or policy.stop_at > now:
                continue
            if instance.status not in STOPPABLE:
                policy.stop_at = None
                policy.save(update_fields=["stop_at"])
                continue
            _auto_stop(
                instance_id, AutoStopKind.SCHEDULE, later("Stopped at the scheduled time."), now=now
            )
        stopped.append(instance_id)
        logger.info("autostop.stopped instance=%s kind=schedule", instance_id)
    return stopped


@dataclass(frozen=True)
class Savings:
    saved_fen: int
    stops: int
    since: datetime


def auto_stop_savings(tenant_id: str, *, now: datetime | None = None) -> Savings:
    """What the automatic stops of this calendar month (in the platform's time zone) saved the
    tenant: for each, what a running hour of the instance cost times the time from the stop to
    the next start (or now), at most 24 hours, counted per whole minute as metering does. A
    monthly rental stopped in its paid month saved nothing."""
    now = now or timezone.now()
    since = timezone.localtime(now).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    restarted = InstanceEvent.objects.filter(
        instance_id=OuterRef("instance_id"),
        at__gt=OuterRef("at"),
        status__in=(S.QUEUED, S.PROVISIONING),
    )
    stops = AutoStop.objects.filter(tenant_id=tenant_id, at__gte=since, at__lte=now).annotate(
        restarted_at=Subquery(restarted.order_by("at").values("at")[:1])
    )
    saved = 0
    count = 0
    for at, price, restarted_at in stops.values_list("at", "price_per_hour_fen", "restarted_at"):
        end = min(restarted_at or now, at + SAVED_CAP, now)
        minutes = int((end - at).total_seconds() // 60)
        saved += (price * minutes * 2 + 60) // 120  # metering's rounding: half up
        count += 1
    return Savings(saved_fen=saved, stops=count, since=since)
