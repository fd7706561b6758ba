"""The queue for GPUs, and the one rule of who waits ahead of whom (_ahead).

A holding waits ahead of an order for GPUs of a product when it is queued for that product,
is not an interruptible (spot) one while the order pays (hourly, monthly: a spot order never
delays a paying one; a spot order waits behind every paying order, whenever it came),
its balance covered it when its turn came (an order that cannot pay must not hold up those
behind it: it is passed over), and it could take the same nodes: an order kept to a region
waits only behind that region's orders and those of any region, an order of any region behind
every region's. Against an order already in line, only those queued before it count.

Backfilling (reserve, spare). The drain (instances.lifecycle.queue_drain) serves the queue in
its order but does not stop at an order that does not fit: a paying order that waits is kept
GPUs on the node(s) where it will fit soonest (reserve: those its own notices make room on, when
it took spot back, so that what they free is kept for it; else the fewest GPUs that stay held
there, counting spot holdings as gone: it takes them back), and the orders behind it, paying
or spot, may start on any GPUs that are not kept so (placement reads the reservations), as long
as there are some (spare). An order behind therefore never takes a GPU an order ahead waits for: the
head starts as soon as the holders of its reserved node end, as it would without those behind
it. Orders kept GPUs for are each kept their own (conservative backfilling: every paying order
ahead keeps its reservation, not only the first); a paying order that no node can be kept for
stops the round for paying orders, so no paying order passes it. Spot orders keep nothing and
take only GPUs that no paying order could use before they are taken back (spare over reserve's
`from_spot`): none kept for one, or kept for one on a node where paying rentals must end before
it can start (an 8-GPU order kept a node that hourly rentals still hold); spot holdings on a
node a paying order is kept are taken back with notice (compute.preemption) when that node has
room for it but for spot. Spot therefore delays a paying order by one notice at most
(SPOT_PREEMPT_GRACE_S, when no GPU is free for it), and an order kept a node that paying
rentals hold only after they end, by that notice. A paying order never waits
for an order behind it. Among orders that ask for the same, the first in line is served first:
the one behind fits only where the one ahead would have.

The rule is written once and bound two ways: to an order's values (waits_ahead, and inside
placement's candidate query, compute.placement, under the GPU model's placement lock, so a new
order, a start and a gang read it in the same statement that finds them nodes), and to each
queued holding's own columns (positions, the place in line the console and the API show). The
queue's order is paying before spot, then queued_at, then id (heads)."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Case, Q, Value, When

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


def heads(
    product: str,
    *,
    skip: list[str],
    limit: int = 8,
    spot_most: int | None = None,
    paying: bool = True,
) -> list[Head]:
    """The first holdings waiting for GPUs of `product`, in the queue's order (paying orders
    before spot ones), less those in
    `skip` (passed over this round), whether their balance covered them or not: the drain
    looks at each (its product decides, under its own row lock). With `spot_most`, spot
    holdings that ask for more GPUs than that are left out (no node has them free); without
    `paying`, paying ones are (no node could be kept for one ahead: reserve)."""
    rows: Any = Holding.objects.filter(
        state=HoldingState.QUEUED, offering__gpu_model__product=product
    ).exclude(pk__in=skip)
    spot = Q(billing=BillingMode.SPOT)
    if spot_most is not None:
        spot &= Q(offering__gpu_count__lte=spot_most)
    rows = rows.filter(spot | ~Q(billing=BillingMode.SPOT) if paying else spot)
    rows = rows.order_by(_SPOT_LAST, "queued_at", "id").values_list("id", "gang")[:limit]
    return [Head(holding_id, gang) for holding_id, gang in rows]


@dataclass(frozen=True)
class Load:
    """A node as backfilling reads it: its GPUs, those free now, and those that stay held (by
    paying holdings, or lost: a paying order takes spot GPUs back)."""

    id: str
    gpu_count: int
    free: int
    staying: int


# GPUs kept, by node id, for the paying orders that wait ahead (reserve).
Reserved = dict[str, int]


def reserve(
    loads: list[Load],
    reserved: Reserved,
    *,
    gpus: int,
    whole: bool,
    count: int = 1,
    from_spot: Reserved | None = None,
    noticed_on: tuple[str, ...] = (),
) -> bool:
    """Keep GPUs for a paying order that waits (backfilling, see the module's docstring): `gpus`
    on one node (the whole node when `whole`; `count` whole nodes for a cluster) where it will
    fit soonest: the nodes its own notices make room on (`noticed_on`, from
    compute.preemption.preempt_for), where it starts one notice from now, then the node with
    the fewest GPUs that stay held and are not kept already, then, among nodes where it could
    start once spot is gone, the most free (the fewest notices), then by id.
    Adds them to `reserved`, and to `from_spot` those on a node where it could start as soon
    as the spot holdings there are gone (ready_but_for_spot): spot may take the others, which
    the order could not use before paying rentals end anyway. False when no node can be kept
    for it (the nodes are kept for orders ahead): nothing behind it may start then."""

    def kept(load: Load) -> int:
        return reserved.get(load.id, 0)

    if whole:
        fit = [load for load in loads if load.gpu_count == gpus and not kept(load)]
    else:
        fit = [load for load in loads if load.gpu_count - kept(load) >= gpus]
    if len(fit) < count:
        return False

    # Kept elsewhere than where its notices went, the GPUs they free are kept for nobody:
    # spot orders behind it (the very holdings noticed, restarted in line) take them as they
    # free, and it gives notice again, drain after drain (traced in sched_sim_month: a 4-GPU
    # order noticed on one node and kept the other waited 3,389 s, 0 s without spot).
    # Where paying rentals must end first, the GPUs free now are beside the point, and
    # they come and go with every notice and every spot start: a reservation that followed
    # them moved from node to node drain after drain, and a paying order behind it, kept off
    # whichever node it had moved to, gave notice on the other each time (traced in
    # sched_sim_month, seed 7 at 4 nodes: an 8-GPU order's reservation flipped between two
    # equally held nodes at every notice, and a 1-GPU order behind it gave 23 notices in
    # 690 s; 0 s without spot). There only the held GPUs and the id decide.
    def soonest(load: Load) -> tuple[bool, int, int, str]:
        ready = ready_but_for_spot(load, kept(load), gpus=load.gpu_count if whole else gpus)
        held = load.staying + kept(load)
        return (load.id not in noticed_on, held, -load.free if ready else 0, load.id)

    fit.sort(key=soonest)
    for load in fit[:count]:
        amount = load.gpu_count if whole else gpus
        if from_spot is not None and ready_but_for_spot(load, kept(load), gpus=amount):
            from_spot[load.id] = from_spot.get(load.id, 0) + amount
        reserved[load.id] = kept(load) + amount
    return True


def together(*kept: Reserved | None) -> Reserved:
    """GPUs kept for several reasons, added up by node (reservations, headroom)."""
    total: Reserved = {}
    for each in kept:
        for node_id, gpus in (each or {}).items():
            total[node_id] = total.get(node_id, 0) + gpus
    return total


def ready_but_for_spot(load: Load, kept: int, *, gpus: int) -> bool:
    """Whether an order of `gpus` kept on this node after `kept` GPUs for orders ahead could
    start as soon as the spot holdings on it are gone: no paying rental has to end first."""
    return load.gpu_count - load.staying - kept >= gpus


def spare(loads: list[Load], reserved: Reserved) -> int:
    """The most GPUs free on one node that no order ahead is kept (reserve): what a paying
    order behind may take (with no reservations, what a spot order may: 0, nothing); given
    the GPUs kept from spot (reserve's `from_spot`), what a spot order may."""
    return max((load.free - reserved.get(load.id, 0) for load in loads), default=0)


@dataclass(frozen=True)
class Shape:
    """What an order asks of the fleet, as a drain compares orders (compute.placement.shape):
    its region ("" = any), whether it takes whole nodes, how many nodes (a gang's ranks), the
    GPUs of each and what each pod asks besides (CPU m, memory, storage MiB, pod slots), and
    whether it is a spot order (fewer GPUs are kept from it: reserve's `from_spot`)."""

    region: str
    whole: bool
    nodes: int
    gpus: int
    need: tuple[int, ...]
    spot: bool = False

    def covers(self, other: "Shape") -> bool:
        """Whether `other` asks at least as much as this one, of nodes this one could have gone
        to, and sees no more GPUs free (a paying order's finding says nothing of a spot one's):
        where this one finds no room, neither does `other`."""
        return (
            (self.spot or not other.spot)
            and self.whole == other.whole
            and self.nodes <= other.nodes
            and (self.gpus == other.gpus if self.whole else self.gpus <= other.gpus)
            and all(mine <= theirs for mine, theirs in zip(self.need, other.need, strict=True))
            and self.region in ("", other.region)
        )


@dataclass
class Unplannable:
    """One drain's memory of the orders it could not plan. Within a drain GPUs are only taken
    (placed, kept for an order ahead: reserve, or given notice, which frees nothing yet), never
    freed, so an order that asks at least as much as one that found no room (`no_room`) finds
    none either, and one that asks at least as much as one that no taking back of spot GPUs
    could make room for (`no_plan`, compute.preemption.plan) cannot be made room for either:
    the drain skips those looks (a placement query, a preemption plan) for it."""

    no_room: list[Shape] = field(default_factory=list)
    no_plan: list[Shape] = field(default_factory=list)

    @staticmethod
    def _covered(shapes: list[Shape], shape: Shape) -> bool:
        return any(known.covers(shape) for known in shapes)

    def roomless(self, shape: Shape) -> bool:
        """Whether an order of `shape` cannot be placed this drain."""
        return self._covered(self.no_room, shape)

    def planless(self, shape: Shape) -> bool:
        """Whether no taking back of spot GPUs can make room for an order of `shape`."""
        return self._covered(self.no_plan, shape)

    def remember(self, shapes: list[Shape], shape: Shape) -> None:
        """Add `shape` to `shapes` (no_room or no_plan) unless one there covers it already."""
        if not self._covered(shapes, shape):
            shapes.append(shape)
