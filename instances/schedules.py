"""What an instance is told about stopping itself: the idle auto-stop (`idle_stop`, from the
user's settings unless the order says otherwise) and a scheduled stop (`stop_at`), set at the
order, by PATCH or by Keep running. instances.autostop carries them out every minute."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from instances.choices import InstanceStatus
from instances.gangs import gang_of
from instances.models import Instance, InstanceEvent
from instances.states import instance_locked
from starverse.accounts.models import IDLE_MINUTES_RANGE, IDLE_UTIL_PCT_RANGE, User
from starverse.accounts.selectors import user_settings
from starverse.accounts.services import bounded_int
from starverse.core.errors import Conflict, InvalidInput
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus
MAX_SCHEDULE = timedelta(days=365)
MAX_STOP_AFTER_HOURS = 24 * 365


@dataclass(frozen=True)
class IdleStop:
    """Stop once every GPU has been below `util_pct` % for `minutes`."""

    util_pct: int
    minutes: int

    def as_dict(self) -> dict[str, int]:
        return {"util_pct": self.util_pct, "minutes": self.minutes}


class Default:
    """The order says nothing about the idle stop: the user's settings decide."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = Default()
UNCHANGED: Any = object()  # a PATCH that leaves a field as it is


def idle_stop_clean(value: Any) -> IdleStop | None:
    """An `idle_stop` as sent ({util_pct, minutes} or null), checked; a refusal names the field
    (`idle_stop.util_pct`, `idle_stop.minutes`)."""
    if value is None or isinstance(value, IdleStop):
        return value
    if not isinstance(value, dict):
        raise InvalidInput(
            _("idle_stop: must be {util_pct, minutes} or null."), code="invalid_idle_stop"
        )
    unknown = sorted(set(value) - {"util_pct", "minutes"})
    if unknown:
        raise InvalidInput(
            _("idle_stop.%(field)s: unknown field.") % {"field": unknown[0]},
            code="invalid_idle_stop",
        )
    return IdleStop(
        util_pct=bounded_int("idle_stop.util_pct", value.get("util_pct"), IDLE_UTIL_PCT_RANGE),
        minutes=bounded_int("idle_stop.minutes", value.get("minutes"), IDLE_MINUTES_RANGE),
    )


def idle_stop_of(instance: Any) -> IdleStop | None:
    """The instance's idle stop (from its stop policy), or None: off."""
    policy = instance.stop_policy
    if policy.idle_stop_util_pct is None or policy.idle_stop_minutes is None:
        return None
    return IdleStop(util_pct=policy.idle_stop_util_pct, minutes=policy.idle_stop_minutes)


def idle_stop_for_order(
    user: User, requested: IdleStop | Default | None
) -> tuple[IdleStop | None, int]:
    """The idle stop an order gets (its own, none as it said null, or the user's defaults), and
    how many minutes before the stop its warning comes (the user's setting)."""
    own = user_settings(user)
    if not isinstance(requested, Default):
        return idle_stop_clean(requested), own.idle_warn_minutes
    if not own.idle_stop_enabled:
        return None, own.idle_warn_minutes
    idle = IdleStop(util_pct=own.idle_stop_util_pct, minutes=own.idle_stop_minutes)
    return idle, own.idle_warn_minutes


def stop_at_clean(value: datetime | None, *, now: datetime | None = None) -> datetime | None:
    """A scheduled stop: in the future and within a year (400 naming `stop_at`)."""
    if value is None:
        return None
    now = now or timezone.now()
    if timezone.is_naive(value):
        raise InvalidInput(_("stop_at: give a time zone."), code="invalid_stop_at")
    if value <= now:
        raise InvalidInput(_("stop_at: must be in the future."), code="invalid_stop_at")
    if value > now + MAX_SCHEDULE:
        raise InvalidInput(_("stop_at: must be within a year."), code="invalid_stop_at")
    return value


def stop_after_hours_clean(hours: Any, *, now: datetime | None = None) -> datetime:
    """`stop_after_hours` at an order: the scheduled stop that many hours from now."""
    bounded_int("stop_after_hours", hours, (1, MAX_STOP_AFTER_HOURS))
    return (now or timezone.now()) + timedelta(hours=hours)


def idle_fields(idle: IdleStop | None, *, warn_minutes: int, now: datetime) -> dict[str, Any]:
    """The stop policy's columns for an idle stop, counted afresh from `now`: a new setting
    never stops an instance for idleness before it was set."""
    return {
        "idle_stop_util_pct": idle.util_pct if idle else None,
        "idle_stop_minutes": idle.minutes if idle else None,
        "idle_warn_minutes": warn_minutes,
        "idle_counted_from": now,
        "idle_warned_at": None,
        "idle_stop_due_at": None,
    }


def instance_schedule_set(
    *, instance_id: str, user: User, idle_stop: Any = UNCHANGED, stop_at: Any = UNCHANGED
) -> Instance:
    """Change an instance's idle stop and/or scheduled stop (PATCH): null clears one. Idle time
    counts afresh from now. Refused (409) once it is terminating, and for a cluster's ranks
    (clusters stop as a whole)."""
    now = timezone.now()
    idle = idle_stop_clean(idle_stop) if idle_stop is not UNCHANGED else UNCHANGED
    when = stop_at_clean(stop_at, now=now) if stop_at is not UNCHANGED else UNCHANGED
    with transaction.atomic():
        instance = instance_locked(instance_id)
        if instance.status in (S.TERMINATING, S.TERMINATED):
            raise Conflict(
                _("This instance is %(state)s; its stops cannot be changed.")
                % {"state": InstanceStatus(instance.status).label.lower()},
                code="wrong_state",
            )
        if gang_of(instance):
            raise Conflict(
                _("A cluster's ranks stop with their cluster; stop the cluster instead."),
                code="cluster_rank",
            )
        fields: dict[str, Any] = {}
        if idle is not UNCHANGED:
            warn = user_settings(user).idle_warn_minutes
            fields.update(idle_fields(idle, warn_minutes=warn, now=now))
        if when is not UNCHANGED:
            fields["stop_at"] = when
        policy = instance.stop_policy
        for name, value in fields.items():
            setattr(policy, name, value)
        policy.save(update_fields=list(fields))
        for message in _stops_messages(instance, idle=idle is not UNCHANGED, when=when):
            InstanceEvent.objects.create(instance=instance, status=instance.status, message=message)
    logger.info("instance.schedule instance=%s fields=%s", instance.id, ",".join(sorted(fields)))
    return instance


def _stops_messages(instance: Instance, *, idle: bool, when: Any) -> list[str]:
    """The timeline's record of what a change set: each stop that changed, in its own words."""
    messages: list[str] = []
    if idle:
        now_idle = idle_stop_of(instance)
        messages.append(
            later("Idle auto-stop off.")
            if now_idle is None
            else later("Idle auto-stop: after %(minutes)s min with every GPU below %(pct)s %%.")
            % {"minutes": now_idle.minutes, "pct": now_idle.util_pct}
        )
    if when is not UNCHANGED:
        messages.append(
            later("No scheduled stop.")
            if when is None
            else later("Scheduled stop at %(at)s.")
            % {"at": timezone.localtime(when).strftime("%Y-%m-%d %H:%M")}
        )
    return messages


def instance_keep_running(*, instance_id: str) -> Instance:
    """The owner says the instance is busy after all: the idle warning goes and idle time counts
    afresh from now, so it stops for idleness `minutes` from now at the earliest."""
    now = timezone.now()
    with transaction.atomic():
        instance = instance_locked(instance_id)
        idle = idle_stop_of(instance)
        if idle is None:
            raise Conflict(_("This instance has no idle auto-stop."), code="idle_stop_off")
        if instance.status != S.RUNNING:
            raise Conflict(_("Only a running instance can be kept running."), code="wrong_state")
        policy = instance.stop_policy
        policy.idle_counted_from, policy.idle_warned_at, policy.idle_stop_due_at = now, None, None
        policy.save(update_fields=["idle_counted_from", "idle_warned_at", "idle_stop_due_at"])
        earliest = timezone.localtime(now + timedelta(minutes=idle.minutes))
        InstanceEvent.objects.create(
            instance=instance,
            status=instance.status,
            message=later(
                "Keep running: idle time counts again from now; if it stays idle it stops at "
                "%(at)s at the earliest."
            )
            % {"at": earliest.strftime("%Y-%m-%d %H:%M")},
        )
    logger.info("instance.keep_running instance=%s", instance.id)
    return instance
