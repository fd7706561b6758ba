"""Instance lifecycle services: ordering (runway check, account limits, idempotency, placement
or the queue), stop / start / terminate, serving the queue as capacity frees (to the orders
that can pay, checked under the wallet lock), and what a node's change of state means for the
instances on it. They decide; the state machine (instances.states) moves."""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, cast

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.holds import account_hold_check
from billing.selectors import wallet_locked
from compute.admission import Runway, admit
from compute.choices import BillingMode, OfferingKind
from compute.holdings import (
    holding_of,
    holding_wait_until,
    holdings_funded,
    holdings_unfunded,
    holds_gpus,
    unfunded,
    waited_out,
)
from compute.models import Image, Offering
from compute.orders import OrderKey, order_commit, ordered_before, request_hash_of
from compute.placement import Gang, choose, choose_nodes, loads, shape
from compute.preemption import headroom, headroom_clear, preempt_for
from compute.queue import (
    Load,
    Reserved,
    Shape,
    Unplannable,
    heads,
    reserve,
    spare,
    together,
    waits_ahead,
)
from fleet.choices import NodeState
from fleet.models import Node
from fleet.selectors import region_orderable
from instances.admission import order_of, runway_of
from instances.budgets import budget_refusal
from instances.charges import period_active, period_charge
from instances.choices import HOLDS_GPUS, InstanceStatus
from instances.gangs import (
    NODE_LOST,
    gang_hooks,
    gang_members,
    gang_of,
    workload_owned,
    workload_owner_lost,
)
from instances.gateway import ports_validate
from instances.models import Instance, InstanceEvent, MonthlyRental, StopPolicy, Workload
from instances.nogpu import start_cpu_only
from instances.schedules import (
    DEFAULT,
    Default,
    IdleStop,
    idle_fields,
    idle_stop_for_order,
    stop_after_hours_clean,
    stop_at_clean,
)
from instances.states import (
    GANG_ORDER,
    gang_locked,
    gpus_release,
    instance_create,
    instance_fail,
    instance_locked,
    instance_mark_placed,
    instance_mark_provisioning,
    instance_mark_queued,
    instance_mark_stopping,
    instance_mark_terminating,
    instance_requeue,
    instances_locked_skipping,
)
from instances.volumes import disks_attach_at_order
from starverse.accounts.models import SshKey, User
from starverse.core.db import atomic_retrying
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import (
    Conflict,
    InvalidInput,
    ServiceError,
)
from starverse.core.money import format_fen
from starverse.core.roles import require_orderer
from starverse.core.text import Deferred, later, localized, parts
from storage.models import Disk

logger = logging.getLogger(__name__)
S = InstanceStatus


def ssh_keys_own(user: User, key_ids: list[str]) -> list[str]:
    """The keys named, each the person's own (keys belong to people, not to the team they
    order for)."""
    if not key_ids:
        return []
    found = set(
        SshKey.objects.filter(user__tenant_id=user.personal_tenant_id, pk__in=key_ids).values_list(
            "pk", flat=True
        )
    )
    missing = [key for key in key_ids if key not in found]
    if missing:
        raise InvalidInput(
            _("Unknown SSH key %(id)s.") % {"id": missing[0]}, code="unknown_ssh_key"
        )
    return list(dict.fromkeys(key_ids))


_CATALOG: dict[tuple[str, str], tuple[float, Any]] = {}  # Any: an offering or an image
C = TypeVar("C")
CATALOG_TTL_S = 5.0


def _cached(kind: str, key: str, load: Callable[[], C]) -> C:
    """Active offerings and images change rarely and are read by every order: each process
    keeps them for a few seconds."""
    now = time.monotonic()
    hit = _CATALOG.get((kind, key))
    if hit is not None and now - hit[0] < CATALOG_TTL_S:
        return cast(C, hit[1])
    value = load()
    _CATALOG[(kind, key)] = (now, value)
    return value


def catalog_offering(offering_id: str) -> Offering | None:
    return _cached(
        "offering",
        offering_id,
        lambda: (
            Offering.objects.select_related("gpu_model").filter(pk=offering_id, active=True).first()
        ),
    )


def catalog_image(image_id: str, tenant_id: str | None = None) -> Image | None:
    """The catalogue's image (cached), else the tenant's own ready one (read afresh: it may
    have just been deleted), else None: never another tenant's."""
    image = _cached(
        "image", image_id, lambda: Image.objects.catalogue().filter(pk=image_id).first()
    )
    if image is None and tenant_id:
        image = Image.objects.usable_by(tenant_id).filter(pk=image_id).first()
    return image


def image_save(*, image: Image) -> None:
    """Save a catalogue image (the operator's edit); the pre-pull DaemonSets follow it on
    every cluster once it commits (instances.provisioning.prepull)."""
    with transaction.atomic():
        image.save()
        enqueue_on_commit("instances.tasks.converge_prepull")


def image_delete(*, image: Image) -> None:
    """Delete a catalogue image no instance uses; its pre-pull DaemonSet goes with it."""
    with transaction.atomic():
        image.delete()
        enqueue_on_commit("instances.tasks.converge_prepull")


def instance_order(
    *,
    user: User,
    offering_id: str,
    image_id: str,
    name: str = "",
    billing: str = BillingMode.HOURLY,
    idempotency_key: str = "",
    auto_renew: bool = True,
    ssh_keys: list[str] | None = None,
    disks: list[str] | None = None,
    auto_recover: bool | None = None,
    ports: list[int] | None = None,
    region: str = "",
    idle_stop: IdleStop | Default | None = DEFAULT,
    stop_at: datetime | None = None,
    stop_after_hours: int | None = None,
    workload: Workload | None = None,
    spot_max_wait_minutes: int | None = None,
    mirrors: bool = True,
    clone_of: str = "",
) -> tuple[Instance, bool]:
    """Order an instance (what it takes: _Request); the same key answers the same order."""
    require_orderer(user)
    declared = ports_validate(ports or [])
    idle, warn_minutes = idle_stop_for_order(user, idle_stop)
    _one_scheduled_stop(stop_at, stop_after_hours, billing, spot_max_wait_minutes)
    request = _Request(
        offering_id=offering_id,
        image_id=image_id,
        name=name,
        billing=billing,
        ssh_keys=ssh_keys or [],
        disks=disks or [],
        ports=declared,
        region=region,
        idle_stop=idle_stop,
        idle=idle,
        warn_minutes=warn_minutes,
        stop_at=stop_at,
        stop_after_hours=stop_after_hours,
        auto_renew=auto_renew,
        auto_recover=auto_recover,
        workload=workload,
        spot_max_wait_minutes=spot_max_wait_minutes,
        mirrors=mirrors,
        clone_of=clone_of,
    )
    key = OrderKey(user.tenant_id, idempotency_key, request.hash())
    if (earlier := ordered_before(Instance.objects.all(), key, "instance")) is not None:
        return earlier, False
    fields, stops = request.instance_fields(user, key)

    def order_once() -> Instance:
        # a new Instance each try: a try that deadlocked may have set its fields
        instance = request.instance_new(fields, stops)
        _place_or_queue(instance, request.disks, key, spot_max_wait_minutes)
        return instance

    return order_commit(Instance.objects.all(), key, "instance", order_once)


# The longest a spot order may say it waits (a week).
SPOT_MAX_WAIT_MINUTES = 7 * 24 * 60


def spot_wait_valid(billing: str, minutes: int | None) -> None:
    """A max wait is for a spot order only, 1 to SPOT_MAX_WAIT_MINUTES (any product's order)."""
    if minutes is None:
        return
    if billing != BillingMode.SPOT:
        raise InvalidInput(
            _('spot_max_wait_minutes: only a spot order (billing "spot") waits so.'),
            code="invalid_spot_max_wait",
            field="spot_max_wait_minutes",
        )
    if not 1 <= minutes <= SPOT_MAX_WAIT_MINUTES:
        raise InvalidInput(
            _("spot_max_wait_minutes: give 1 to %(most)d minutes, or leave it out to wait.")
            % {"most": SPOT_MAX_WAIT_MINUTES},
            code="invalid_spot_max_wait",
            field="spot_max_wait_minutes",
        )


def _one_scheduled_stop(
    stop_at: datetime | None, stop_after_hours: int | None, billing: str, max_wait: int | None
) -> None:
    """One scheduled stop at most, and a max wait only for a spot order."""
    spot_wait_valid(billing, max_wait)
    if stop_at is not None and stop_after_hours is not None:
        raise InvalidInput(
            _("stop_at: give stop_at or stop_after_hours, not both."), code="invalid_stop_at"
        )


@dataclass(frozen=True)
class _Request:
    """What an instance order asks for, its ports and idle stop checked (the idle stop as the
    order gets it: `idle`, `warn_minutes`), the rest not yet. instance_order places it now, or
    queues it behind earlier orders for the same GPU, and answers (instance, created), the same
    for the same Idempotency-Key. `idle_stop` DEFAULT: the user's; `workload`: a job's program,
    unsaved; `clone_of`: the instance whose disks its first start restores (instances.clones);
    the rest as POST /instances has them (docs/api.md)."""

    offering_id: str
    image_id: str
    name: str
    billing: str
    ssh_keys: list[str]
    disks: list[str]
    ports: list[int]
    region: str
    idle_stop: IdleStop | Default | None
    idle: IdleStop | None
    warn_minutes: int
    stop_at: datetime | None
    stop_after_hours: int | None
    auto_renew: bool
    auto_recover: bool | None
    # (its owner orders it once, under its own key: not part of the hash)
    workload: Workload | None = None
    spot_max_wait_minutes: int | None = None
    mirrors: bool = True
    clone_of: str = ""

    def hash(self) -> str:
        """The request's hash, which tells a repeat from another order under the same key."""
        return request_hash_of(
            offering=self.offering_id,
            image=self.image_id,
            name=self.name,
            billing=self.billing,
            ssh_keys=sorted(self.ssh_keys),
            **({"disks": sorted(self.disks)} if self.disks else {}),
            **({"ports": self.ports} if self.ports else {}),
            **({"region": self.region} if self.region else {}),
            # an order that leaves them to the defaults hashes as it did before they existed
            **(
                {}
                if isinstance(self.idle_stop, Default)
                else {"idle_stop": self.idle and self.idle.as_dict()}
            ),
            **({"stop_at": self.stop_at.isoformat()} if self.stop_at else {}),
            **(
                {"stop_after_hours": self.stop_after_hours}
                if self.stop_after_hours is not None
                else {}
            ),
            **(
                {"spot_max_wait_minutes": self.spot_max_wait_minutes}
                if self.spot_max_wait_minutes is not None
                else {}
            ),
            **({} if self.mirrors else {"mirrors": False}),
            **({"clone_of": self.clone_of} if self.clone_of else {}),
        )

    def instance_fields(self, user: User, key: OrderKey) -> tuple[dict[str, Any], dict[str, Any]]:
        """The new instance's columns and its stop policy's, once what the order names is
        checked: the catalog's offering and image, the region, the orderer's own SSH keys,
        the scheduled stop."""
        now = timezone.now()
        stop_at = self.stop_at
        if self.stop_after_hours is not None:
            stop_at = stop_after_hours_clean(self.stop_after_hours, now=now)
        stop_at = stop_at_clean(stop_at, now=now)
        offering, image = orderable(
            self.offering_id, self.image_id, self.billing, tenant_id=user.tenant_id
        )
        region_id = order_region(user, self.region, self.disks)
        key_ids = ssh_keys_own(user, self.ssh_keys)
        # Network-backed storage lets a cloud instance move; a whole node is the node.
        recover = self.auto_recover
        return {
            "tenant_id": user.tenant_id,
            "created_by": user,
            "offering": offering,
            "image": image,
            "name": self.name.strip() or localized(offering, "name"),
            "billing": self.billing,
            "idempotency_key": key.idempotency_key,
            "request_hash": key.request_hash,
            "ssh_key_ids": key_ids,
            "ports": self.ports,
            "region_id": region_id,
            "auto_recover": offering.kind == OfferingKind.CLOUD if recover is None else recover,
            "mirrors": self.mirrors,
            "cloned_from": self.clone_of,
        }, {
            "stop_at": stop_at,
            **idle_fields(self.idle, warn_minutes=self.warn_minutes, now=now),
        }

    def instance_new(self, fields: dict[str, Any], stops: dict[str, Any]) -> Instance:
        """The new instance, unsaved, with its stop policy and (billed monthly) its rental
        attached: instances.states.instance_create inserts them together."""
        instance = Instance(**fields)
        instance.stop_policy = StopPolicy(**stops)
        if self.workload is not None:
            # a copy each try, like the instance: a try that deadlocked may have set its fields
            instance.workload = Workload(
                owner=self.workload.owner,
                argv=self.workload.argv,
                env=self.workload.env,
                labels=self.workload.labels,
            )
        if self.billing == BillingMode.MONTHLY or not self.auto_renew:
            # an hourly order that turns renewal off keeps its word for a later month
            instance.monthly = MonthlyRental(auto_renew=self.auto_renew)
        return instance


def order_region(user: User, region: str, disk_ids: list[str]) -> str | None:
    """The region an order (an instance, or every rank of a cluster) is kept to: the one it
    names (400 unknown_region otherwise), else its disks' (a disk attaches only in its own
    region), else None: any region, where there is room."""
    if region:
        return region_orderable(region).pk
    return _disks_region(user, disk_ids)


def _disks_region(user: User, disk_ids: list[str]) -> str | None:
    """The region of the first of the disks an order names (the rest must be there too), or
    None: no disks, so any region."""
    if not disk_ids:
        return None
    found = dict(
        Disk.objects.filter(tenant_id=user.tenant_id, pk__in=disk_ids).values_list("pk", "region")
    )
    return next((found[pk] for pk in disk_ids if pk in found), None)


def orderable(
    offering_id: str, image_id: str, billing: str, *, tenant_id: str
) -> tuple[Offering, Image]:
    """The active offering and the image an order names (the catalogue's or the ordering
    tenant's own), and whether it may be billed so."""
    offering = catalog_offering(offering_id)
    if offering is None:
        raise InvalidInput(
            _("Unknown offering %(id)s.") % {"id": offering_id}, code="unknown_offering"
        )
    image = catalog_image(image_id, tenant_id)
    if image is None:
        raise InvalidInput(_("Unknown image %(id)s.") % {"id": image_id}, code="unknown_image")
    if billing == BillingMode.MONTHLY and offering.price_per_month_fen is None:
        raise InvalidInput(_("Monthly billing is offered for whole nodes only."), code="no_monthly")
    if billing == BillingMode.SPOT and offering.spot_price_per_hour_fen is None:
        raise InvalidInput(
            _(
                '%(offering)s is not offered as interruptible (spot): choose billing "hourly", '
                "or an offering with a spot price."
            )
            % {"offering": localized(offering, "name")},
            code="no_spot",
        )
    return offering, image


def _place_or_queue(
    instance: Instance, disk_ids: list[str], key: OrderKey, max_wait: int | None = None
) -> None:
    """Inside the order's transaction: GPUs now when nobody waits for this GPU and some are
    free, else the queue; then the ordered disks are attached, the order is admitted (the
    hold, the runway, the budgets and the account's limits, under the wallet lock), and a
    placed monthly rental pays its first month (a refusal rolls the whole order back). A spot
    order waits at most `max_wait` minutes (None: as long as it takes: queue_review); a
    paying order that waits has the queue served after commit, which takes spot GPUs back for
    it (compute.preemption). Locks: GPU model, disks, wallet."""
    # a new order: placed in parallel with other new orders, never before one that waits
    spot = instance.billing == BillingMode.SPOT
    product = instance.offering.gpu_model.product
    placement = choose(
        instance.offering,
        instance.region_id or "",
        image=instance.image.container_image,
        concurrent=True,
        spot=spot,
        reserved=_kept(product, spot=spot),
    )
    instance_create(instance, placement=placement)
    disks_attach_at_order(instance, disk_ids, actor=instance.created_by)  # the orderer, acting
    admit(order_of(instance, key=key))
    if placement is not None and instance.billing == BillingMode.MONTHLY:
        period_charge(instance)
    if placement is None and spot and max_wait is not None:
        holding_wait_until(instance.id, timezone.now() + timedelta(minutes=max_wait))
    if placement is None or (settings.SPOT_HEADROOM and not spot):
        # an order waits: the queue is served at once (backfilling may start it on GPUs no
        # order ahead is kept, compute.queue), and a paying one takes back spot GPUs; a paying
        # one placed took GPUs kept for paying orders: the drain keeps the next ones
        # (compute.preemption.headroom_clear)
        enqueue_on_commit("instances.tasks.drain_queue", product)


def gang_place_or_queue(
    ranks: list[Instance],
    *,
    gang: str,
    disk_ids: list[list[str]] | None = None,
    key: OrderKey | None = None,
    max_wait: int | None = None,
) -> Gang | None:
    """Inside a cluster order's transaction, its ranks (unsaved, in rank order, one whole-node
    offering; `gang`: the cluster's id, which their holdings are one gang of): whole nodes for
    all of them now when nobody waits for this GPU and enough are free, else all of them queue
    as one order; then each rank's ordered cloud disks (`disk_ids[rank]`, as an instance order
    attaches them) are attached, the whole cluster is admitted as one order (`key`, its
    cluster's Idempotency-Key), and placed monthly ranks pay their month (a refusal rolls the
    whole order back). A queued spot gang waits at most `max_wait` minutes (queue_review fails
    every rank then); a queued paying one has the queue served after commit, which takes spot
    nodes back for it (compute.preemption). Returns where they went, or None (queued). Locks:
    GPU model, disks, wallet; never a partial placement."""
    offering = ranks[0].offering
    spot = ranks[0].billing == BillingMode.SPOT
    nodes = choose_nodes(
        offering,
        len(ranks),
        ranks[0].region_id or "",
        behind_queue=True,
        spot=spot,
        reserved=_kept(offering.gpu_model.product, spot=spot),
    )
    for index, rank in enumerate(ranks):
        instance_create(
            rank,
            placement=None if nodes is None else nodes.placements[index],
            queued_at=ranks[0].created_at,  # all of them in line at one moment, as one order
            gang=gang,
        )
    for rank, wanted in zip(ranks, disk_ids or [], strict=False):
        disks_attach_at_order(rank, wanted, actor=rank.created_by)
    admit(order_of(ranks[0], key=key, nodes=len(ranks)))
    if nodes is not None and ranks[0].billing == BillingMode.MONTHLY:
        for rank in ranks:
            period_charge(rank)
    if nodes is None and spot and max_wait is not None:
        until = timezone.now() + timedelta(minutes=max_wait)
        for rank in ranks:
            holding_wait_until(rank.id, until)
    elif nodes is None and not spot:
        enqueue_on_commit("instances.tasks.drain_queue", offering.gpu_model.product)
    return nodes


def gang_start(*, ranks: list[Instance]) -> None:
    """Start a stopped or failed cluster (its ranks locked, in rank order): monthly ranks in
    their paid period on the nodes they keep; otherwise all of them wait as one order and are
    placed together when whole nodes for all are free and nobody who can pay waits before
    them, once the whole cluster is admitted as one order (compute.admission.admit)."""
    if all(period_active(rank) and holds_gpus(rank.id) for rank in ranks):
        account_hold_check(ranks[0].tenant_id)  # nothing else to admit: their nodes are theirs
        for rank in ranks:
            instance_mark_provisioning(rank)
        return
    now = timezone.now()
    for rank in ranks:
        if holds_gpus(rank.id):
            gpus_release(rank)
        instance_mark_queued(rank, at=now)
    _try_place(ranks[0], fcfs=True)
    admit(order_of(ranks[0], nodes=len(ranks)))


Outcome = Literal["placed", "wait", "unfunded", "over_budget"]


def _try_place(
    instance: Instance, *, fcfs: bool, budgets: bool = False, round_: "_Round | None" = None
) -> tuple[Outcome, Runway | None]:
    """Give a queued (locked) instance GPUs if a node has them free, nobody who can pay waits
    before it (with `fcfs`), and its tenant's balance covers its runway, read under the wallet
    lock so that it holds until the placement commits (locks: the instance, its GPU model, the
    wallet). A monthly rental pays its month as it is placed. Returns "placed"; "wait" (no room,
    or someone ahead); or "unfunded", with the runway it lacks (whether or not there is room:
    an order that cannot pay must not hold up those behind it). With `budgets` (an order
    leaving the queue), "over_budget" when its orderer's or its team's monthly budget no longer
    fits it (instances.budgets). The drain passes its `round_`: the GPUs reserved for the
    orders ahead (compute.queue.reserve), of which it takes none, nor takes spot GPUs back on
    them, and what it found it cannot plan (compute.queue.Unplannable), which it does not
    look at again."""
    product = instance.offering.gpu_model.product
    region = instance.region_id or ""
    spot = instance.billing == BillingMode.SPOT
    if fcfs and waits_ahead(product, region, before=holding_of(instance.id).queued_at, spot=spot):
        return "wait", None
    if gang := gang_of(instance):
        return _try_place_gang(instance, gang, budgets=budgets, round_=round_)
    form = shape(instance.offering, region, spot=spot)
    placement = None
    if round_ is None or not round_.unplannable.roomless(form):
        placement = choose(
            instance.offering,
            region,
            image=instance.image.container_image,
            reserved=round_.kept(spot=spot) if round_ else _kept(product, spot=spot),
        )
        if placement is None and round_ is not None:
            round_.unplannable.remember(round_.unplannable.no_room, form)
    found = runway_of(instance, wallet_locked(instance.tenant_id))
    if not found.covered:
        return "unfunded", found
    if budgets and budget_refusal(instance, found.own_fen) is not None:
        return "over_budget", None
    if placement is None:
        if not spot:  # a paying order that can pay takes spot GPUs back, with notice
            _take_back(instance, form, round_)
        return "wait", None
    if instance.billing == BillingMode.MONTHLY and not period_active(instance):
        period_charge(instance)
    instance_mark_placed(instance, *placement)
    return "placed", None


def _try_place_gang(
    head: Instance, gang: str, *, budgets: bool = False, round_: "_Round | None" = None
) -> tuple[Outcome, Runway | None]:
    """_try_place for a queued gang, through its first member (locked): every queued member,
    locked after it in the gang's order, gets a whole node or none does."""
    every = gang_locked(gang)
    ranks = [rank for rank in every if rank.status == S.QUEUED]
    spot = head.billing == BillingMode.SPOT
    form = shape(head.offering, head.region_id or "", nodes=len(ranks), gang=True, spot=spot)
    nodes = None
    if round_ is None or not round_.unplannable.roomless(form):
        nodes = choose_nodes(
            head.offering,
            len(ranks),
            head.region_id or "",
            prefer=switches_held(every),
            reserved=round_.kept(spot=spot)
            if round_
            else _kept(head.offering.gpu_model.product, spot=spot),
        )
        if nodes is None and round_ is not None:
            round_.unplannable.remember(round_.unplannable.no_room, form)
    found = runway_of(head, wallet_locked(head.tenant_id))
    if not found.covered:
        return "unfunded", found
    if budgets and budget_refusal(head, found.own_fen) is not None:
        return "over_budget", None
    if nodes is None:
        if not spot:  # a paying gang takes spot nodes back, all or none
            _take_back(head, form, round_)
        return "wait", None
    for rank, placement in zip(ranks, nodes.placements, strict=True):
        if rank.billing == BillingMode.MONTHLY and not period_active(rank):
            period_charge(rank)
        instance_mark_placed(rank, *placement)
    return "placed", None


def _take_back(head: Instance, form: Shape, round_: "_Round | None") -> None:
    """A paying order (its locked `head`: an instance, or a gang's first rank) that found no
    room and can pay takes spot GPUs back, with notice (compute.preemption.preempt_for),
    outside the GPUs the drain's `round_` keeps for orders ahead, which then keeps it GPUs on
    the nodes its notices make room on (_Round.waits); unless the round knows already that
    nothing taken back makes room for an order that asks this much
    (compute.queue.Unplannable), which it remembers when so."""
    if round_ is not None and round_.unplannable.planless(form):
        return
    reserved = round_.reserved if round_ is not None else None
    taken = preempt_for(head.offering, form.region, nodes=form.nodes, reserved=reserved)
    if round_ is None:
        return
    if taken is None:
        round_.unplannable.remember(round_.unplannable.no_plan, form)
    else:
        round_.noticed_on[head.id] = taken.nodes


def switches_held(ranks: list[Instance]) -> frozenset[str]:
    """The leaf switches under the nodes a gang's members hold (a member that moves goes near
    them)."""
    held = [rank.node_id for rank in ranks if rank.status in HOLDS_GPUS and rank.node_id]
    return frozenset(
        Node.objects.filter(pk__in=held).exclude(switch="").values_list("switch", flat=True)
    )


def queue_drain(*, product: str, now: datetime | None = None) -> list[str]:
    """Place queued instances for this GPU product, in the queue's order (compute.queue),
    backfilling: an order that does not fit waits, a paying one with GPUs kept for it, and
    those behind it, paying or spot, may take the GPUs nobody ahead is kept (compute.queue's
    docstring), while some are left (_Round). One whose balance does not
    cover its runway is passed over, so the queue serves first come, first served among the
    orders that can pay (_unfunded); so is one that its orderer's or team's monthly budget no
    longer fits, its timeline saying which (_over_budget). Returns the ids placed."""
    now = now or timezone.now()
    placed: list[str] = []
    passed: set[str] = set()
    # the GPUs kept for paying orders (SPOT_HEADROOM), freed of spot with notice: it locks the
    # GPU models, then the spot rentals it takes back, an order a drain's head does not
    # follow (the head first), so a deadlock with one is run again
    kept = atomic_retrying(lambda: headroom_clear(product, now=now)).kept
    round_ = _Round(headroom=kept)
    while round_.open():
        with transaction.atomic():
            head = _queue_head(product, passed, round_=round_)
            if head is None:
                return placed
            outcome, lacking = _try_place(head, fcfs=False, budgets=True, round_=round_)
            if lacking is not None:
                _unfunded(head, lacking, now=now)
                passed.add(gang_of(head) or head.id)
            elif outcome == "over_budget":
                _over_budget(head)
                passed.add(gang_of(head) or head.id)
            elif outcome == "placed":
                placed.append(head.id)
                round_.loads.clear()  # its GPUs are taken: read again when next needed
            else:
                passed.add(gang_of(head) or head.id)
                round_.waits(head)
    return placed


@dataclass
class _Round:
    """One drain's backfilling: the orders left waiting (not looked at again), the GPUs kept
    for the paying ones (compute.queue.reserve) and those of them kept from spot too
    (`from_spot`), whether a paying order may still start
    (`paying`: no, once one could be kept nothing), the most GPUs a spot order may ask
    (`spot_most`: the most free on one node that no paying order is kept, nor headroom; None
    until an order waited), the GPUs kept for paying orders as the drain began (`headroom`,
    compute.preemption.headroom), the nodes a waiting paying order's notices make room on
    (`noticed_on`, by its
    id: it is kept GPUs there), the orders it cannot plan (compute.queue.Unplannable) and the
    nodes' loads, by
    region ("" = all), read once and again only after a placement took GPUs (an order that
    waits changes only the reservations, kept here)."""

    waiting: list[str] = field(default_factory=list)
    reserved: Reserved = field(default_factory=dict)
    from_spot: Reserved = field(default_factory=dict)
    headroom: Reserved = field(default_factory=dict)
    paying: bool = True
    spot_most: int | None = None
    noticed_on: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unplannable: Unplannable = field(default_factory=Unplannable)
    loads: dict[str, list[Load]] = field(default_factory=dict)

    def loads_of(self, product: str, region: str = "") -> list[Load]:
        """The nodes' loads (compute.placement.loads), read at most once between placements."""
        if region not in self.loads:
            self.loads[region] = loads(product, region)
        return self.loads[region]

    def open(self) -> bool:
        """Whether an order behind may still start."""
        return self.paying or self.spot_most is None or self.spot_most > 0

    def waits(self, head: Instance) -> None:
        """A queued (locked) order was left waiting: keep GPUs for it when it pays (a cluster,
        a whole node for each queued rank); read what is left for those behind."""
        self.waiting.append(head.id)
        product = head.offering.gpu_model.product
        everywhere = self.loads_of(product)
        if head.billing != BillingMode.SPOT and self.paying:
            gang = gang_of(head)
            mine = self.loads_of(product, head.region_id) if head.region_id else everywhere
            count = gang_members(gang).filter(status=S.QUEUED).count() if gang else 1
            whole = bool(gang) or head.offering.kind == OfferingKind.BARE_METAL
            gpus = head.offering.gpu_count
            kept = reserve(
                mine,
                self.reserved,
                gpus=gpus,
                whole=whole,
                count=count,
                from_spot=self.from_spot,
                noticed_on=self.noticed_on.pop(head.id, ()),
            )
            self.paying = kept  # (it may still take spot GPUs back where none are kept)
        # headroom counted: without it a drain tried every queued spot order in turn
        self.spot_most = spare(everywhere, self.kept(spot=True))

    def kept(self, *, spot: bool) -> Reserved:
        """The GPUs an order behind may not take: all those kept for the paying orders ahead,
        or for a spot order those kept on nodes where their order could start once spot is
        gone (compute.queue.reserve) and those kept for paying orders (headroom)."""
        if not spot:
            return self.reserved
        return together(self.from_spot, self.headroom) if self.headroom else self.from_spot


def _kept(product: str, *, spot: bool) -> Reserved | None:
    """What an order placed outside a drain may not take: for a spot one, the GPUs kept for
    paying orders (compute.preemption.headroom); nothing for a paying one. A new order reads
    it before it takes the placement lock: one placed on GPUs kept meanwhile is taken back at
    the next drain (headroom_clear), as any spot found there."""
    return headroom(product).kept if spot else None


def _queue_head(product: str, passed: set[str], *, round_: "_Round") -> Instance | None:
    """The first queued order of the product that no other transaction is serving, locked: an
    instance, or a queued cluster through its lowest queued rank (which locks the rest).
    Orders in `passed` (ids, or clusters' ids) were passed over this round; those the round
    left waiting, and those it says cannot start, are not looked at (heads)."""
    tried: list[str] = list(round_.waiting)
    while found := heads(product, skip=tried, spot_most=round_.spot_most, paying=round_.paying):
        for head in found:
            tried.append(head.id)
            if (head.gang or head.id) in passed:
                continue
            order = Instance.objects.filter(status=S.QUEUED)
            order = order.filter(holding__gang=head.gang) if head.gang else order.filter(pk=head.id)
            # a gang's first member in its lock order (instances.states.GANG_ORDER)
            locked = (
                instances_locked_skipping(order)
                .select_related("offering__gpu_model", "holding")
                .order_by(*GANG_ORDER)
                .first()
            )
            if locked is not None:
                return locked
    return None


_UNFUNDED = later(
    "Your cash balance of %(have)s does not cover %(need)s: one %(unit)s of this order "
    "(%(own)s) plus one hour of your running instances (%(burn)s). Orders that can pay are "
    "served first. Top up before %(until)s to keep this order; after that it fails, at no cost."
)
_UNFUNDED_TRIAL = later(
    "Your trial credit of %(have)s does not cover %(need)s at the trial prices: one hour of "
    "this order (%(own)s) plus one hour of your running instances that have a trial price "
    "(%(burn)s); nor does your cash balance of %(cash)s cover %(cash_need)s at the standard "
    "prices. Orders that can pay are served first. Top up before %(until)s to keep this "
    "order; after that it fails, at no cost."
)
_UNFUNDED_FAILED = later(
    "Your cash balance of %(have)s did not cover %(need)s, one %(unit)s of this order "
    "(%(own)s) plus one hour of your running instances (%(burn)s), while this order waited; "
    "nothing was charged. Top up and order again."
)
_UNFUNDED_FAILED_TRIAL = later(
    "Neither your trial credit of %(have)s covered %(need)s at the trial prices (one hour of "
    "this order, %(own)s, plus one hour of your running instances that have a trial price, "
    "%(burn)s) nor your cash balance of %(cash)s %(cash_need)s at the standard prices while "
    "this order waited; nothing was charged. Top up and order again."
)


def _over_budget(instance: Instance) -> None:
    """A queued (locked) order whose turn came and that its budget no longer fits (the budget
    was lowered, or spent while it waited): it stays queued, unstarted and uncharged, passed
    over at every turn until the budget is raised or a new month begins; its timeline says
    why, once for each change of the amounts."""
    need = runway_of(instance, wallet_locked(instance.tenant_id)).own_fen
    refusal = budget_refusal(instance, need, queued=True)
    if refusal is None:
        return
    last = instance.events.order_by("-at", "-id").values_list("message", "params").first()
    if last != parts(refusal):
        InstanceEvent.objects.create(instance=instance, status=instance.status, message=refusal)
        logger.info("queue.over_budget instance=%s tenant=%s", instance.id, instance.tenant_id)


def _unfunded(instance: Instance, lacking: Runway, *, now: datetime) -> None:
    """A queued (locked) instance whose turn came and whose balance does not cover it: it
    keeps its place, passed over, and its timeline says until when; after
    QUEUE_UNFUNDED_GRACE_MINUTES it fails, never having cost anything."""
    grace = timedelta(minutes=settings.QUEUE_UNFUNDED_GRACE_MINUTES)
    # an order of an offering with a trial price says what it lacks in trial credit, which a
    # trial account (the one most often here) would pay it from
    shown = lacking.trial or lacking
    amounts = {
        "have": format_fen(shown.have_fen),
        "need": format_fen(shown.need_fen),
        "own": format_fen(shown.own_fen),
        "burn": format_fen(shown.burn_fen),
        "unit": lacking.unit,
        "cash": format_fen(lacking.have_fen),
        "cash_need": format_fen(lacking.need_fen),
    }
    # a queued cluster is passed over, and fails, as one order
    order = (
        gang_members(gang).filter(status=S.QUEUED)
        if (gang := gang_of(instance))
        else Instance.objects.filter(pk=instance.pk)
    )
    since = holding_of(instance.id).unfunded_since
    if since is None:
        holdings_unfunded(list(order.values_list("pk", flat=True)), since=now)
        until = timezone.localtime(now + grace).strftime("%Y-%m-%d %H:%M")
        InstanceEvent.objects.create(
            instance=instance,
            status=instance.status,
            message=(_UNFUNDED_TRIAL if lacking.trial else _UNFUNDED) % {**amounts, "until": until},
        )
        logger.info("queue.unfunded instance=%s tenant=%s", instance.id, instance.tenant_id)
    elif now - since >= grace:
        message = _UNFUNDED_FAILED_TRIAL if lacking.trial else _UNFUNDED_FAILED
        for instance_id in list(order.order_by(*GANG_ORDER).values_list("pk", flat=True)):
            instance_fail(instance_id, message % amounts)
        logger.info("queue.unfunded_failed instance=%s", instance.id)


def queue_review(*, tenant_id: str | None = None, now: datetime | None = None) -> list[str]:
    """Look again at the queued orders passed over for want of money (of one tenant, after it
    was credited; or of all, every minute): one its balance covers now waits in line again, one
    past its grace fails; then the queue of every GPU product with orders waiting is served.
    Returns the ids placed."""
    now = now or timezone.now()
    _spot_waits_end(now)
    queued = Instance.objects.filter(status=S.QUEUED)
    if tenant_id is not None:
        queued = queued.filter(tenant_id=tenant_id)
    for instance_id in unfunded(tenant_id=tenant_id):
        with transaction.atomic():
            instance = instance_locked(instance_id)
            if instance.status != S.QUEUED or holding_of(instance.id).unfunded_since is None:
                continue
            found = runway_of(instance, wallet_locked(instance.tenant_id))
            if not found.covered:
                _unfunded(instance, found, now=now)
                continue
            holdings_funded([instance.id])
            InstanceEvent.objects.create(
                instance=instance,
                status=instance.status,
                message=later("The balance covers this order again; it waits for GPUs in line."),
            )
    products = queued.values_list("offering__gpu_model__product", flat=True).distinct()
    placed: list[str] = []
    for product in sorted(set(products)):
        placed += queue_drain(product=product, now=now)
    return placed


def _spot_waits_end(now: datetime) -> None:
    """Spot orders that waited as long as they said they would fail, at no cost."""
    for instance_id in waited_out(now):
        instance_fail(
            instance_id,
            later(
                "No spot GPUs came free within the wait this order allowed; nothing was "
                "charged. Order again, allow a longer wait, or rent by the hour."
            ),
        )
        logger.info("queue.spot_waited_out instance=%s", instance_id)


STOP_REQUESTED = gettext_noop("Stop requested; billing stopped.")


def _as_whole_cluster(instance: Instance, *, by_owner: bool) -> None:
    """An instance that something else owns acts only through its owner, or a platform stop
    (`by_owner`); never alone, through /instances. A cluster's rank: a cluster stops, starts
    and terminates as a whole (stopping and starting one rank would start a new, unbilled
    pre-flight round at will). A job's rank (it runs the job's program: instances.Workload):
    the job decides when it runs again and when it ends."""
    if by_owner:
        return
    # a multi-node job's rank is one of its cluster's gang: its job is named, where it acts
    owner = Workload.objects.filter(pk=instance.pk).values_list("owner", flat=True).first()
    if gang_of(instance) and owner is None:
        raise Conflict(
            _(
                "This instance is rank %(rank)s of the cluster %(cluster)s, and a cluster "
                "stops, starts and terminates as a whole: do it on the cluster instead."
            )
            % gang_hooks().member_words(instance),
            code="cluster_rank",
        )
    if owner is not None:
        raise Conflict(
            _(
                "This instance runs the program of %(owner)s, which starts and ends it: "
                "cancel or resubmit it there instead."
            )
            % {"owner": owner or _("its job")},
            code="job_rank",
        )


def instance_stop(*, instance_id: str, reason: str = "", by_owner: bool = False) -> Instance:
    """Stop billing now (the minute in progress counts as a started minute) and delete the pod;
    the disk is kept. A cluster's rank only `by_owner` (_as_whole_cluster)."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        _as_whole_cluster(instance, by_owner=by_owner)
        if instance.status not in (S.RUNNING, S.CHECKING, S.PROVISIONING):
            raise Conflict(
                _("Only a running or starting instance can be stopped; this one is %(state)s.")
                % {"state": InstanceStatus(instance.status).label.lower()},
                code="wrong_state",
            )
        message = reason if isinstance(reason, Deferred) else later(reason or STOP_REQUESTED)
        instance_mark_stopping(instance, message)
    return instance


def instance_start(
    *, instance_id: str, by_owner: bool = False, gpus_attached: bool = True
) -> Instance:
    """Start a stopped or failed instance: a monthly rental in its paid period on the node it
    keeps; any other, when the balance covers its runway and the account's limits allow it, on
    GPUs free anywhere, behind earlier orders for them that can pay. Not `gpus_attached`: in
    no-GPU mode (instances.nogpu). Never a cluster's rank: its cluster starts every rank
    together (clusters.services.cluster_start)."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        _as_whole_cluster(instance, by_owner=by_owner)
        if instance.status not in (S.STOPPED, S.FAILED):
            raise Conflict(_("Only a stopped instance can be started."), code="wrong_state")
        if instance.stop_reason:
            instance.stop_reason = ""
            instance.save(update_fields=["stop_reason"])
        if not gpus_attached:
            start_cpu_only(instance)
            return instance
        if period_active(instance) and holds_gpus(instance.id):
            # its GPUs are its own until the month ends: no runway or limit to check
            account_hold_check(instance.tenant_id)
            instance_mark_provisioning(instance)
            return instance
        instance_mark_queued(instance)
        _try_place(instance, fcfs=True)
        admit(order_of(instance))
    return instance


def instance_restart(*, instance_id: str) -> Instance:
    """Start again after a stop made to change the disks, in the mode it ran in (with its GPUs
    or in no-GPU mode); if starting is refused (no runway, say), the instance stays stopped and
    its timeline says why."""
    try:
        attached = holding_of(instance_id).gpus_attached
        return instance_start(instance_id=instance_id, gpus_attached=attached)
    except ServiceError as error:
        instance = Instance.objects.get(pk=instance_id)
        InstanceEvent.objects.create(
            instance=instance,
            status=instance.status,
            message=later("It could not start again: %(reason)s") % {"reason": error.message},
        )
        return instance


def instance_terminate(
    *, instance_id: str, keep_disk: bool = False, by_owner: bool = False
) -> Instance:
    """Terminate: the pod, service and secret go; the instance's own disk is deleted unless
    `keep_disk` keeps it as a cloud disk; attached cloud disks are detached, data intact. A
    cluster's rank only `by_owner` (_as_whole_cluster)."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        _as_whole_cluster(instance, by_owner=by_owner)
        if instance.status in (S.TERMINATED, S.TERMINATING):
            return instance
        instance_mark_terminating(instance, keep_disk=keep_disk)
    return instance


def instances_on_node_changed(*, node_id: str, state: str, reason: str) -> list[str]:
    """Tell every instance on a node what happened to it. A node that is down takes its running
    and starting instances with it: they fail (billing stops, GPUs are released) with the
    reason, or, recovering automatically, are placed again on a healthy node; a stopping one is
    left to its stop, which frees a pod on a down node at once; one of a gang is its owner's
    to move (a cluster's rank moves to a healthy node with its whole cluster's billing paused:
    clusters.ranks.rank_lost), and one that runs an owner's program (a job's rank) is its
    program's owner's (instances.gangs.workload_owner_lost). On a cordoned or
    draining node they keep running and get an event saying why."""
    node = Node.objects.get(pk=node_id)
    affected = []
    for instance_id in Instance.objects.filter(node=node, status__in=HOLDS_GPUS).values_list(
        "id", flat=True
    ):
        owned = False
        with transaction.atomic():
            instance = instance_locked(instance_id)
            if instance.status not in HOLDS_GPUS or instance.node_id != node.pk:
                continue
            if state != NodeState.DOWN:
                _out_of_service_note(instance, node=node, reason=reason)
            elif instance.status == S.STOPPING:
                continue
            elif (owned := workload_owned(instance)) or gang_of(instance):
                pass  # below: its owner decides, with its own row locked first
            elif instance.auto_recover and instance.holding.gpus_attached:
                # (one in no-GPU mode fails instead: placed again, it would wait for GPUs)
                _recover(instance, node=node, reason=reason)
            else:
                _lost(instance, node=node, reason=reason)
        if state == NodeState.DOWN and not _owner_moved(instance, owned, node, reason):
            continue
        affected.append(instance_id)
    return affected


def _owner_moved(instance: Instance, owned: bool, node: Node, reason: str) -> bool:
    """An instance on a node that went down whose owner decides (its program's, else its
    gang's): whether the owner moved it. True for one the instances app dealt with itself."""
    if owned:
        return bool(workload_owner_lost(instance, cause=NODE_LOST, node=node, reason=reason))
    gang = gang_of(instance)
    return not gang or gang_hooks().member_lost(instance.pk, gang=gang, node=node, reason=reason)


def _out_of_service_note(instance: Instance, *, node: Node, reason: str) -> None:
    InstanceEvent.objects.create(
        instance=instance,
        status=instance.status,
        message=later(
            "Its node %(node)s was taken out of service: %(reason)s. The instance keeps running."
        )
        % {"node": node.name, "reason": reason},
    )


def _lost(instance: Instance, *, node: Node, reason: str) -> None:
    message = later(
        "The node %(node)s was lost (%(reason)s). Billing stopped at that moment; start the "
        "instance again to place it on a healthy node."
    ) % {"node": node.name, "reason": reason}
    instance_fail(instance.id, message)


def instance_recover(instance_id: str, *, reason: str) -> bool:
    """Place an instance that holds GPUs again on another node, as after its node's loss (its
    pod evicted or preempted there): billing pauses, its disks follow (_recover). False if it
    holds no GPUs (or is stopping) any more."""
    with transaction.atomic():
        instance = instance_locked(instance_id)
        if instance.status not in HOLDS_GPUS or instance.status == S.STOPPING:
            return False
        if instance.node is None:
            return False
        _recover(instance, node=instance.node, reason=reason)
    return True


def _recover(instance: Instance, *, node: Node, reason: str) -> None:
    """Automatic recovery after node loss: billing pauses now, the GPUs are given back, and the
    instance is placed again, ahead of new orders, on a healthy node with the same disks (they
    are network-backed, so the new pod mounts the same claims)."""
    paused = timezone.localtime(timezone.now()).strftime("%Y-%m-%d %H:%M:%S")
    message = later(
        "The node %(node)s was lost (%(reason)s). Billing paused at %(at)s; placing the "
        "instance again on a healthy node with the same disks."
    ) % {"node": node.name, "reason": reason, "at": paused}
    instance_requeue(instance, message)
    outcome, lacking = _try_place(instance, fcfs=False)
    if lacking is not None:
        _unfunded(instance, lacking, now=timezone.now())
    elif outcome == "wait":
        InstanceEvent.objects.create(
            instance=instance,
            status=S.QUEUED,
            message=later("No healthy capacity right now; it starts as soon as some frees."),
        )
