"""The meter: every billable holding's usage — an instance, a cluster's rank, an endpoint's
replica — priced by the minute and posted to the ledger by the hour.

A product opens a metering session on its holding when it starts to serve (meter_open: the
pod is ready) and closes it when it stops serving (meter_close). In between, each tick
(meter_tick) takes every metering holding's closed minutes — at most MAX_CATCH_UP_MINUTES a
tick — and holds them against the tenant's wallet as pending money (billing.services.
usage_accrue_many): minute m of a session costs minute_charge_fen(price, m), from trial credit
at the offering's trial price while the free trial credit covers the minute, else from cash.
A minute the free cash cannot pay takes what is left and the holding is reported short: its
product stops it, so the balance never goes below zero and the stop comes within a minute.

The accrued minutes are posted once a holding has POSTING_MINUTES of them, and at the close of
its session, as one usage posting keyed `{meter key}:{first}-{last}` (billing.services.
usage_settle_many): the ledger grows with customers and hours, not minutes. A holding's
pending amounts and its wallet's change in the same transaction as the accrual or the posting,
so a crash between the two loses or doubles nothing, and a key posted twice is refused by the
ledger's unique index.

Products above the compute core register, per kind of holding, what the meter tells them
(meter_hooks_register), once the tick's money has committed: the fen accrued (the products'
cost columns), and what their wallets could not pay. The tick holds holdings and wallets and
never waits for a product's row meanwhile: products lock their row before their holding."""

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Case, Q, Value, When
from django.utils import timezone
from django.utils.translation import gettext_noop

from billing.services import (
    Accrual,
    Accrued,
    Settlement,
    minute_charge_fen,
    usage_accrue_many,
    usage_settle_many,
)
from compute.choices import HoldingKind
from compute.models import Holding
from compute.pricing import hour_price_expression
from starverse.core.db import bulk_set

logger = logging.getLogger(__name__)

# A tick after an outage charges at most a day of minutes per holding; the next ticks go on.
MAX_CATCH_UP_MINUTES = 24 * 60
# Accrued minutes are posted once a holding has this many: one usage posting an hour.
POSTING_MINUTES = 60
# What the ledger says a kind's minutes were, and which id it names (instance_id).
_DESCRIPTION = {
    HoldingKind.INSTANCE: gettext_noop("GPU usage"),
    HoldingKind.RANK: gettext_noop("GPU usage"),
    HoldingKind.REPLICA: gettext_noop("Inference endpoint"),
}


class MeterHooks(NamedTuple):
    """What a product hears of its holdings' metering, by what the ledger names (an instance,
    or the endpoint of replicas), once the tick's money has committed: `accrued` (id → fen, in
    a transaction of its own: the product's cost, a cache for people to read) and `after` (id
    → fen, and the ids whose wallets could not pay a minute: stop those)."""

    accrued: Callable[[dict[str, int]], None]
    after: Callable[[dict[str, int], list[str]], None]


# What the ledger says of the minutes of an instance in no-GPU mode (its pod without GPUs).
NO_GPU_DESCRIPTION = gettext_noop("No-GPU mode usage")

_hooks: dict[str, MeterHooks] = {}


def meter_hooks_register(kind: HoldingKind, hooks: MeterHooks) -> None:
    """Called from a product's AppConfig.ready: the meter imports no product."""
    _hooks[kind] = hooks


def minutes_closed(since: datetime, now: datetime, *, started_minute: bool = False) -> int:
    """The minutes of a session from `since` to `now`: the closed ones, or with
    `started_minute` the one in progress too (a stop pays the minute it is asked in)."""
    elapsed = (now - since).total_seconds()
    if started_minute:
        return max(0, int(-(-elapsed // 60)))
    return max(0, int(elapsed // 60))


def meter_open(holding_id: str, *, key: str, since: datetime) -> None:
    """A metering session starts on the holding at `since`, its postings keyed under `key`
    (unique per session: the product's id and session number). Call it in the transaction
    that moves the product to serving. A session still open is closed first (meters_open)."""
    meters_open({holding_id: key}, since=since)


def meters_open(keys: dict[str, str], *, since: datetime) -> None:
    """Metering sessions start on several holdings at once (keys: holding id → its session's
    key), all from `since`: one holding (meter_open) or a cluster's ranks, billed from the same
    moment. Sessions still open are closed first, the minute in progress paid (one query finds
    them); one UPDATE starts them all."""
    if not keys:
        return
    with transaction.atomic():
        rows = _metering(Q(pk__in=list(keys)), skip_locked=False)
        if rows:
            _meter(rows, since, started_minute=True, closing=True)
        Holding.objects.filter(pk__in=list(keys)).update(
            meter_key=Case(*(When(pk=pk, then=Value(key)) for pk, key in keys.items())),
            metered_since=since,
            metered_minutes=0,
        )


def meter_close(holding_id: str, *, now: datetime, started_minute: bool = True) -> int:
    """The holding's session ends at `now`: its minutes (the one in progress counted as
    started, unless not `started_minute`: a pause that bills closed minutes only) are accrued
    and posted at once, and it meters no more. Returns the fen accrued now, for the product's
    own cost. Call it in the product's transaction that ends serving."""
    with transaction.atomic():
        rows = _metering(Q(pk=holding_id), skip_locked=False)
        if not rows:
            return 0
        accrued, _short = _meter(rows, now, started_minute=started_minute, closing=True)
        Holding.objects.filter(pk=holding_id).update(metered_since=None)
    return accrued.get(holding_id, 0)


@dataclass
class MeterResult:
    """What a tick did: minutes and fen accrued, postings written, and per kind of holding
    what could not pay (as the ledger names it: an instance, an endpoint)."""

    minutes: int = 0
    fen: int = 0
    postings: int = 0
    short: dict[str, list[str]] = field(default_factory=dict)


def meter_tick(*, now: datetime | None = None) -> MeterResult:
    """Accrue every metering holding's closed minutes and post those with an hour of them;
    holdings locked by another tick or by their product's own move are left to it. Tells the
    products (meter_hooks_register) what accrued and what could not pay."""
    now = now or timezone.now()
    result = MeterResult()
    with transaction.atomic():
        rows = _metering(Q(metered_since__isnull=False), skip_locked=True)
        accrued, short = _meter(rows, now, closing=False, result=result)
    by_kind: dict[str, dict[str, int]] = {}
    for row in rows:
        if row.id in accrued:
            fen = by_kind.setdefault(row.kind, {})
            fen[row.resource_id] = fen.get(row.resource_id, 0) + accrued[row.id]
        if row.id in short and row.resource_id not in result.short.get(row.kind, []):
            result.short.setdefault(row.kind, []).append(row.resource_id)
    # The products' cost columns, in a transaction of their own once the money has committed:
    # a product locks its row before its holding (a stop closing its session), so the tick,
    # which holds holdings and wallets, must not wait for a product's row while it holds them.
    with transaction.atomic():
        for kind, fen in by_kind.items():
            if kind in _hooks:
                _hooks[kind].accrued(fen)
    for kind in by_kind.keys() | result.short.keys():
        if kind in _hooks:
            _hooks[kind].after(by_kind.get(kind, {}), result.short.get(kind, []))
    logger.info(
        "meter.tick holdings=%d minutes=%d fen=%d postings=%d short=%d",
        len(rows),
        result.minutes,
        result.fen,
        result.postings,
        len(short),
    )
    return result


class _Metered(NamedTuple):
    """A metering holding as the meter reads it (a plain row: a tick reads every running
    holding, and model objects cost more than the arithmetic)."""

    id: str
    kind: str
    parent: str
    meter_key: str
    since: datetime
    metered: int
    pending_minutes: int
    pending_trial_minutes: int
    pending_cash_fen: int
    pending_promo_fen: int
    price: int
    trial_price: int | None
    wallet_id: str
    gpus_attached: bool

    @property
    def resource_id(self) -> str:
        """What its postings name: an endpoint for a replica, else the holding's product."""
        return self.parent if self.kind == HoldingKind.REPLICA else self.id


# What a minute of a holding costs: a 60th of its hour's price (compute.pricing), in cash and
# in trial credit.
_PRICES = {
    "price": hour_price_expression(),
    "trial_price": hour_price_expression(trial=True),
}


@functools.cache
def _priced() -> Any:  # a QuerySet of Holding with `price` and `trial_price`
    """Holdings with their minute's prices annotated, resolved once a process: resolving the
    price expressions costs more than the query of a single holding (a stop, a start), and
    every read filters a clone of it."""
    return Holding.objects.annotate(price=_PRICES["price"], trial_price=_PRICES["trial_price"])


def _metering(where: Q, *, skip_locked: bool) -> list[_Metered]:
    # locks the holdings only (of=self): wallets are locked later, in id order, by billing
    rows = (
        _priced()
        .filter(where, metered_since__isnull=False)
        .select_for_update(skip_locked=skip_locked, of=("self",))
        .values_list(
            "id",
            "kind",
            "parent",
            "meter_key",
            "metered_since",
            "metered_minutes",
            "pending_minutes",
            "pending_trial_minutes",
            "pending_cash_fen",
            "pending_promo_fen",
            "price",
            "trial_price",
            "tenant__wallet__id",
            "gpus_attached",
        )
    )
    return [_Metered._make(row) for row in rows]  # metered_since is set: filtered above


def _accruals(row: _Metered, upto: int) -> list[Accrual]:
    return [
        Accrual(
            wallet_id=row.wallet_id,
            amount_fen=minute_charge_fen(row.price, minute),
            trial_amount_fen=(
                None if row.trial_price is None else minute_charge_fen(row.trial_price, minute)
            ),
        )
        for minute in range(row.metered + 1, upto + 1)
    ]


def _meter(
    rows: list[_Metered],
    now: datetime,
    *,
    closing: bool,
    started_minute: bool = False,
    result: MeterResult | None = None,
) -> tuple[dict[str, int], set[str]]:
    """Accrue the locked holdings' minutes up to `now` and post what is due (everything when
    `closing`). Returns (holding → fen accrued, the holdings short of money)."""
    result = result or MeterResult()
    plan: list[tuple[_Metered, int, int]] = []
    accruals: list[Accrual] = []
    for row in rows:
        upto = minutes_closed(row.since, now, started_minute=started_minute)
        if not closing:  # a tick catches up a day at a time; a close pays the whole session
            upto = min(upto, row.metered + MAX_CATCH_UP_MINUTES)
        if upto > row.metered or (closing and row.pending_minutes):
            plan.append((row, max(upto, row.metered), len(accruals)))
            accruals += _accruals(row, upto)
    accrued = usage_accrue_many(accruals)
    fen: dict[str, int] = {}
    short: set[str] = set()
    updates, settlements = [], []
    for row, upto, start in plan:
        mine = accrued[start : start + (upto - row.metered)]
        fen[row.id] = sum(a.cash_fen + a.promo_fen for a in mine)
        if any(a.short for a in mine):
            short.add(row.id)
        pending = _pending(row, mine)
        if pending.minutes and (closing or pending.minutes >= POSTING_MINUTES):
            settlements.append(_settlement(row, upto, pending))
            pending = _Pending(0, 0, 0, 0)
        updates.append((row.id, upto, *pending))
        result.minutes += len(mine)
        result.fen += fen[row.id]
    result.postings += usage_settle_many(settlements)
    bulk_set(
        Holding,
        updates,
        [
            "metered_minutes",
            "pending_minutes",
            "pending_trial_minutes",
            "pending_cash_fen",
            "pending_promo_fen",
        ],
    )
    return fen, short


class _Pending(NamedTuple):
    """A holding's accrued, unposted minutes and money."""

    minutes: int
    trial_minutes: int
    cash_fen: int
    promo_fen: int


def _pending(row: _Metered, accrued: list[Accrued]) -> _Pending:
    return _Pending(
        minutes=row.pending_minutes + len(accrued),
        trial_minutes=row.pending_trial_minutes + sum(1 for a in accrued if a.trial),
        cash_fen=row.pending_cash_fen + sum(a.cash_fen for a in accrued),
        promo_fen=row.pending_promo_fen + sum(a.promo_fen for a in accrued),
    )


def _settlement(row: _Metered, upto: int, pending: _Pending) -> Settlement:
    first = upto - pending.minutes + 1
    return Settlement(
        wallet_id=row.wallet_id,
        key=f"{row.meter_key}:{first}-{upto}",
        resource_id=row.resource_id,
        description=(
            _DESCRIPTION.get(HoldingKind(row.kind), gettext_noop("GPU usage"))
            if row.gpus_attached
            else NO_GPU_DESCRIPTION
        ),
        minutes=pending.minutes,
        trial_minutes=pending.trial_minutes,
        cash_fen=pending.cash_fen,
        promo_fen=pending.promo_fen,
    )
