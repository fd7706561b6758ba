"""Dry runs of orders, for every product and every start (`dry_run: true` in the API): the
product's own order path runs, admission (compute.admission.admit) included, inside a
transaction that is always rolled back, so that what a dry run answers is what the real order
would have met, and nothing is created, charged or sent (tasks go on commit, which never comes).

order_dry_run runs the path and answers a DryRun: the refusal the real order would have got
(a ServiceError), and the quote of the order admission saw:
- `price_per_hour_fen`: an hour of it at the prices that pay it (its trial price, paid from
  trial credit; else its standard price), all its units (a cluster's ranks, an endpoint's
  replicas); a monthly rental's hourly list price, with `price_per_month_fen`;
- `paid_by`: "trial" when trial credit pays it (an hourly order of an offering with a trial
  price, while the trial credit covers its runway: instances.charges), else "cash";
- `runway_hours`: how long the money that pays it lasts at its price plus what the tenant's
  other instances burn an hour (None when nothing burns: a monthly rental alone);
- `queue_position`: its place in the line for its GPUs (1 = next) when it would wait, else None;
- `expected_start_s`: 0 when it would get GPUs at once, None when it would wait (the queue
  gives no promise) or when its replicas are placed later (an endpoint).
An order that admission never saw (a monthly rental starting inside its paid month: nothing
to admit; or one refused before admission, e.g. an unknown offering) has no quote (None)."""

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from django.db import transaction

from billing.selectors import wallet_locked
from compute.admission import order_runway
from compute.choices import BillingMode
from compute.orders import Order, admission_watch
from compute.queue import positions
from starverse.core.errors import ServiceError


@dataclass(frozen=True)
class Quote:
    """What an order would cost and when it would start (the module says each field)."""

    price_per_hour_fen: int
    paid_by: Literal["trial", "cash"]
    runway_hours: float | None
    queue_position: int | None
    expected_start_s: int | None
    price_per_month_fen: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DryRun:
    """A dry run's answer: the quote (None when admission never saw the order) and the
    refusal the real order would have got (None: it would have been taken)."""

    quote: Quote | None
    refusal: ServiceError | None

    def parts(self) -> tuple[dict[str, Any] | None, ServiceError | None]:
        """The quote as the API answers it, and the refusal."""
        return (None if self.quote is None else self.quote.as_dict()), self.refusal


class _RolledBack(Exception):
    """Raised to roll a dry run's transaction back, whatever it did."""


def order_dry_run(place: Callable[[], object]) -> DryRun:
    """Run `place` (a product's real order or start path, without an Idempotency-Key) in a
    transaction rolled back at the end; answer its refusal and the quote of the order
    admission saw, read before the rollback (its place in the queue needs its rows)."""
    seen: list[Order] = []
    refusal: ServiceError | None = None
    quote: Quote | None = None
    try:
        with admission_watch(seen), transaction.atomic():
            try:
                with transaction.atomic():  # a refusal rolls back to here, the quote still reads
                    place()
            except ServiceError as error:
                refusal = error
            if seen:
                quote = quote_of(seen[-1], taken=refusal is None)
            raise _RolledBack
    except _RolledBack:
        pass
    return DryRun(quote=quote, refusal=refusal)


def quote_of(order: Order, *, taken: bool) -> Quote:
    """The quote of `order`, inside its dry run's transaction; `taken`: the order's rows are
    still there (not refused), so its place in the queue can be read."""
    found = order_runway(order, wallet_locked(order.tenant_id))
    monthly = order.billing == BillingMode.MONTHLY
    hourly = (order.offering.price_per_hour_fen or 0) * order.units
    trial = found.trial is not None and found.trial.covered
    if trial and found.trial is not None:
        price, have, burn = found.trial.own_fen, found.trial.have_fen, found.trial.burn_fen
    else:
        price, have, burn = hourly, found.have_fen, found.burn_fen
    if monthly:  # prepaid: its month comes off first, then only the others burn
        have, rate = have - found.own_fen, burn
    else:
        rate = price + burn
    position = None
    if taken and order.queued and order.pk:
        position = positions([order.pk]).get(order.pk)
    starts_now = taken and not order.queued and order.product != "endpoint"
    return Quote(
        price_per_hour_fen=price,
        paid_by="trial" if trial else "cash",
        runway_hours=round(max(have, 0) / rate, 1) if rate > 0 else None,
        queue_position=position,
        expected_start_s=0 if starts_now else None,
        price_per_month_fen=(order.offering.price_per_month_fen or 0) * order.units
        if monthly
        else None,
    )
