"""The queue for GPUs, and the one rule of who waits ahead of whom (_ahead).

A holding waits ahead of an order for GPUs of a product when it is queued for that product,
is not an interruptible (spot) one while the order pays (hourly, monthly: a spot order never
delays a paying one; a spot order waits behind every paying order, whenever it came),
its balance covered it when its turn came (an order that cannot pay must not hold up those
behind it: it is passed over), and it could take the same nodes: an order kept to a region
waits only behind that region's orders and those of any region, an order of any region behind
every region's. Against an order already in line, only those queued before it count.

The rule is written once and bound two ways: to an order's values (waits_ahead, and inside
placement's candidate query, compute.placement, under the GPU model's placement lock, so a new
order, a start and a gang read it in the same statement that finds them nodes), and to each
queued holding's own columns (positions, the place in line the console and the API show). The
queue's order is paying before spot, then queued_at, then id (heads)."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Case, Value, When

from compute.choices import BillingMode, HoldingState
from compute.models import Holding, Offering
from fleet.models import GpuModel
from starverse.core.db import execute_prepared

# The rule over `q` (a holding) and `qm` (its offering's GPU model), for an order whose
# product, region ('' for any) and queued_at (NULL: not in line yet) are the SQL expressions
# {product}, {region}, {before} and {spot} (whether the order is a spot one).
_AHEAD = """q.state = 'queued' AND qm.product = {product} AND q.unfunded_since IS NULL
   AND ({region} = '' OR q.region_id = {region} OR q.region_id IS NULL)
   AND (CASE WHEN q.billing = 'spot' THEN {spot} AND ({before} IS NULL OR q.queued_at < {before})
             ELSE {spot} OR {before} IS NULL OR q.queued_at < {before} END)"""
_JOINED = """{holding} q JOIN {offering} qo ON qo.id = q.offering_id
  JOIN {gpu_model} qm ON qm.id = qo.gpu_model_id"""
_EXISTS = "SELECT 1 FROM {joined} WHERE {rule} LIMIT 1"
_POSITIONS = """
SELECT h.id, (SELECT COUNT(DISTINCT COALESCE(NULLIF(q.gang, ''), q.id))
                FROM {joined} WHERE {rule}) + 1
  FROM {holding} h
  JOIN {offering} o ON o.id = h.offering_id
  JOIN {gpu_model} m ON m.id = o.gpu_model_id
 WHERE h.id = ANY(%(ids)s) AND h.state = 'queued'
"""


def tables() -> dict[str, str]:
    return {
        "holding": Holding._meta.db_table,
        "offering": Offering._meta.db_table,
        "gpu_model": GpuModel._meta.db_table,
    }


def ahead_exists_sql() -> str:
    """Whether anyone waits ahead of the order given by the parameters %(product)s,
    %(region)s, %(before)s (a timestamp, or NULL for an order not in line yet) and %(spot)s
    (whether it is a spot order): an EXISTS
    subquery placement embeds in its candidate query."""
    rule = _AHEAD.format(
        product="%(product)s",
        region="%(region)s",
        before="%(before)s::timestamptz",
        spot="%(spot)s::boolean",
    )
    return _EXISTS.format(joined=_JOINED.format(**tables()), rule=rule)


def waits_ahead(
    product: str, region: str = "", *, before: datetime | None = None, spot: bool = False
) -> bool:
    """Whether an order waits that an order for `product` (kept to `region`, "" = any; in line
    since `before`, or None when it is new; a spot one with `spot`) must not pass."""
    with connection.cursor() as cursor:
        execute_prepared(
            cursor,
            "sv_ahead",
            ahead_exists_sql(),
            {"product": product, "region": region, "before": before, "spot": spot},
        )
        return cursor.fetchone() is not None


def positions(holding_ids: list[str]) -> dict[str, int]:
    """Each queued holding's place in the line for its GPU product (1 = next), for a whole
    page in one query: one more than the orders that wait ahead of it (a cluster's ranks are
    one order). Holdings that do not wait are left out."""
    if not holding_ids:
        return {}
    rule = _AHEAD.format(
        product="m.product",
        region="COALESCE(h.region_id, '')",
        before="h.queued_at",
        spot="(h.billing = 'spot')",
    )
    sql = _POSITIONS.format(joined=_JOINED.format(**tables()), rule=rule, **tables())
    with connection.cursor() as cursor:
        cursor.execute(sql, {"ids": list(holding_ids)})
        return dict(cursor.fetchall())


@dataclass(frozen=True)
class Head:
    """A holding at the front of a queue: its id and the gang it belongs to ("" alone)."""

    id: str
    gang: str


# Paying orders first, then the spot ones (each in its own order of arrival).
_SPOT_LAST = Case(When(billing=BillingMode.SPOT, then=Value(1)), default=Value(0))


def heads(product: str, *, skip: list[str], limit: int = 8) -> list[Head]:
    """The first holdings waiting for GPUs of `product`, in the queue's order (paying orders
    before spot ones), less those in
    `skip` (passed over this round), whether their balance covered them or not: the drain
    looks at each (its product decides, under its own row lock)."""
    rows: Any = (
        Holding.objects.filter(state=HoldingState.QUEUED, offering__gpu_model__product=product)
        .exclude(pk__in=skip)
        .order_by(_SPOT_LAST, "queued_at", "id")
        .values_list("id", "gang")[:limit]
    )
    return [Head(holding_id, gang) for holding_id, gang in rows]
