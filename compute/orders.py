"""An order of GPUs, as every product's admission reads it (an instance, a cluster, an inference
endpoint; or a start of one), and the one rule of ordering twice.

An Idempotency-Key names one order of a tenant, held by a unique (tenant, key) constraint on
the product's row: the same key with the same request answers the earlier order, with another
request it is a 409 `idempotency_conflict`, and an order that lost the race to a concurrent one
under the same key (the constraint's IntegrityError at commit) answers the one that won. The
checks an order meets under the wallet lock (the hold, the runway, the budgets, the limits) are
compute.admission.admit, which takes an Order."""

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from django.db import IntegrityError
from django.db.models import Model, QuerySet
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from compute.choices import BillingMode
from compute.models import Offering
from compute.pricing import hour_price
from starverse.core.db import atomic_retrying
from starverse.core.errors import IdempotencyConflict

# What an order makes: it names the order in the admission's answers.
Product = Literal["instance", "cluster", "endpoint", "job"]
Row = TypeVar("Row", bound=Model)


def request_hash_of(**fields: Any) -> str:
    """What an order asked for, as its row keeps it to tell a repeat from another order."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class OrderKey:
    """An order's Idempotency-Key ("" for none) in its tenant, and its request's hash."""

    tenant_id: str
    idempotency_key: str
    request_hash: str


@dataclass(frozen=True)
class Order:
    """An order (or a start) of `units` instances, ranks or replicas of `offering`, as its
    admission checks it. Its runway is an hour of them (a month, billed monthly; nothing of its
    own inside a `paid` month), plus, with `burns_with_others`, an hour of what the tenant's
    other instances burn; with `trial_credit` an hourly one may be paid from trial credit at the
    offering's trial price instead (and meets the trial account's premium-GPU limit). `gpus` is
    what the account's GPU limit counts of it; `in_usage`: its instances are saved already, so
    the tenant's usage counts them; `held_elsewhere` reads, under the wallet lock, the GPUs the
    tenant holds outside instances that the product's limit counts too (an endpoint's: every
    replica its endpoints may scale to). `pk` and `gang`: its own row and the other members
    of its gang (a cluster's ranks: compute.models.Holding.gang), left out of what the tenant
    and its members burn; `queued`: it waits in the queue (the queued-orders limit). `key`:
    its Idempotency-Key, None for a start. `cpu_only`: a start in no-GPU mode (an instance's
    pod without its GPUs), whose hour costs the offering's cpu_only_price_per_hour_fen, in
    cash or in trial credit alike, and which asks for no GPUs (`gpus` 0)."""

    product: Product
    tenant_id: str
    created_by_id: str
    offering: Offering
    gpus: int
    billing: str = BillingMode.HOURLY
    units: int = 1
    region_id: str | None = None
    key: OrderKey | None = None
    pk: str | None = None
    gang: str = ""
    paid: bool = False
    queued: bool = False
    in_usage: bool = True
    burns_with_others: bool = True
    trial_credit: bool = True
    held_elsewhere: Callable[[], int] | None = None
    cpu_only: bool = False

    @property
    def own_fen(self) -> int:
        """What its runway asks for itself: an hour of its units at its hour's price
        (compute.pricing: by mode, then by billing); a month of them, prepaid, billed monthly
        with their GPUs."""
        if self.paid:
            return 0
        if self.billing == BillingMode.MONTHLY and not self.cpu_only:
            return (self.offering.price_per_month_fen or 0) * self.units
        found = hour_price(self.offering, billing=self.billing, gpus_attached=not self.cpu_only)
        return (found or 0) * self.units


# a different request under a key: what each product's answer has always said
_ORDER_CONFLICT = gettext_noop("This Idempotency-Key was used for a different order.")
_CONFLICT = {
    "instance": _ORDER_CONFLICT,
    "cluster": _ORDER_CONFLICT,
    "job": _ORDER_CONFLICT,
    "endpoint": gettext_noop("This Idempotency-Key was used for a different request."),
}


def ordered_before(rows: QuerySet[Row], key: OrderKey, product: Product) -> Row | None:
    """The row (of `rows`, the product's) an earlier order under this key made, or None; the
    key used for a different request is a conflict (409 `idempotency_conflict`)."""
    if not key.idempotency_key:
        return None
    found = rows.filter(tenant_id=key.tenant_id, idempotency_key=key.idempotency_key).first()
    if found is not None and found.serializable_value("request_hash") != key.request_hash:
        raise IdempotencyConflict(_(_CONFLICT[product]))
    return found


def order_commit(
    rows: QuerySet[Row], key: OrderKey, product: Product, make: Callable[[], Row]
) -> tuple[Row, bool]:
    """Run `make` (which saves the order's rows and admits it) in its own transaction, again
    when PostgreSQL broke a deadlock with it (starverse.core.db.atomic_retrying: `make` builds
    its rows anew each time). Returns (row, True); or, when a concurrent order under the same
    key committed first, (that order's row, False)."""
    try:
        return atomic_retrying(make), True
    except IntegrityError:
        earlier = ordered_before(rows, key, product)
        if earlier is None:
            raise
        return earlier, False


_watching: ContextVar[list[Order] | None] = ContextVar("admission_watch", default=None)


@contextmanager
def admission_watch(seen: list[Order]) -> Iterator[None]:
    """While it lasts, every order compute.admission.admit admits is appended to `seen` (a dry
    run's quote is of the order admission saw: compute.dryrun)."""
    reset = _watching.set(seen)
    try:
        yield
    finally:
        _watching.reset(reset)


def admission_seen(order: Order) -> None:
    """Called by compute.admission.admit with each order it admits (admission_watch)."""
    seen = _watching.get()
    if seen is not None:
        seen.append(order)
