"""What an order or a start of any product (an instance, a cluster, an inference endpoint) must
meet before it may hold or wait for GPUs: the account not on hold, a runway on the balance,
its orderer's and its team's budgets, and the account's limits, all in one function (admit),
which takes the order as a compute.orders.Order. The checks run under the tenant's wallet lock
(billing.selectors.wallet_locked), so the balance and the counts hold until the decision
commits and two orders at once cannot both pass. It lives here, not in the compute core with
the Order, because what it reads counts the tenant's instances (instances.selectors,
instances.budgets).

The runway is one hour of the instance (a month for a monthly rental; of every rank, for a
cluster) plus one hour of what the tenant's other instances burn, in cash at the standard
prices; or, for an hourly instance of an offering with a trial price, the same hour at the trial
prices in trial credit (the money the minutes would then be paid from: instances.charges). An
endpoint's is an hour of one replica (of its minimum, when more), in cash only.

The limits are how many orders may wait in the queue, how many GPUs an account may hold and
wait for, and how many GPUs of the premium models an account living on trial credit may; an
operator sets an account's own in the admin (TenantLimits), an empty one is the setting's
default."""

from dataclasses import dataclass, replace
from datetime import datetime
from typing import NamedTuple

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.holds import account_hold_check
from billing.models import Wallet
from billing.selectors import wallet_has_paid, wallet_locked
from compute.choices import BillingMode
from compute.orders import Order, OrderKey, Product
from instances.budgets import budget_check, budget_refusal
from instances.charges import period_active
from instances.choices import InstanceStatus
from instances.gangs import gang_members, gang_of
from instances.models import Instance
from instances.selectors import (
    Limits,
    Usage,
    admission_reads,
    premium_models,
    spend_rows,
    tenant_limits,
    tenant_usage,
)
from starverse.core.errors import (
    Conflict,
    InsufficientBalance,
    InvalidInput,
    ServiceError,
    TooManyRequests,
)
from starverse.core.money import format_fen
from starverse.core.text import Deferred

# Idempotency keys of console orders, apart from keys that API clients choose (every product's
# console form sends its token under this prefix).
ORDER_KEY_PREFIX = "console:"
# What an order or a start may meet besides the shared error answers: the account's limits
# (here), each named by its code; the detail says which limit and how to raise it.
ACCOUNT_LIMITS = {
    409: "Or over a limit of the account: `gpu_limit` (GPUs held and queued), `trial_limit` "
    "(premium GPUs on trial credit: top up).",
    429: "Or `queue_limit`: the account has as many orders queued as it may (no Retry-After: "
    "wait for one to start, or cancel one).",
}


@dataclass(frozen=True)
class TrialRunway:
    """The same runway at trial prices: one hour of the instance at its offering's trial price
    plus one hour of the tenant's other instances that have one, at theirs; and the trial
    credit the wallet holds."""

    have_fen: int
    own_fen: int
    burn_fen: int

    @property
    def need_fen(self) -> int:
        return self.own_fen + self.burn_fen

    @property
    def covered(self) -> bool:
        return self.have_fen >= self.need_fen


@dataclass(frozen=True)
class Runway:
    """What a start needs in cash: one hour of the instance's price (a month for a monthly
    rental, nothing for one inside its paid month) plus one hour of what the tenant's other
    instances burn, placed or running (their hourly price; monthly rentals are prepaid and burn
    nothing, so they are not counted); and the cash the wallet has (runway_funds). `trial`:
    the runway at trial prices, for an hourly instance of an offering with a trial price; either
    covers the start. `product`: whose runway it is (a whole cluster's, an endpoint's: its
    message says so)."""

    have_fen: int
    own_fen: int
    burn_fen: int
    unit: str
    product: Product = "instance"
    trial: TrialRunway | None = None

    @property
    def need_fen(self) -> int:
        return self.own_fen + self.burn_fen

    @property
    def covered(self) -> bool:
        return self.have_fen >= self.need_fen or (self.trial is not None and self.trial.covered)


HOUR, MONTH = gettext_noop("hour"), gettext_noop("month")


class Funds(NamedTuple):
    """What a runway may spend of a wallet: cash net of arrears, and trial credit."""

    cash_fen: int
    trial_fen: int


def runway_funds(wallet: Wallet) -> Funds:
    """The one read of a wallet for a runway (every product's, every start's and the queue's):
    what is free of the usage the meter accrued and has not yet posted (compute.metering);
    arrears exist only while no cash is free, and what is owed counts against the runway."""
    return Funds(
        cash_fen=wallet.cash_free_fen - wallet.arrears_fen, trial_fen=wallet.promo_free_fen
    )


def order_runway(order: Order, wallet: Wallet, *, burn: tuple[int, int] | None = None) -> Runway:
    """The runway of `order` for the tenant of `wallet` (compute.orders.Order says what it
    counts). `burn`: what the tenant's other instances burn an hour (standard, trial), when the
    caller read it already (admit)."""
    if not order.burns_with_others:
        burn = (0, 0)
    elif burn is None:
        rows = spend_rows(
            [order.tenant_id],
            starting=True,
            exclude=order.pk or "",
            exclude_gang=order.gang,
        )
        burn = (rows[0][1] or 0, rows[0][2] or 0) if rows else (0, 0)
    burn_fen, trial_burn_fen = burn
    funds = runway_funds(wallet)
    monthly = order.billing == BillingMode.MONTHLY
    trial_price = order.offering.trial_price_per_hour_fen
    trial = None
    if order.trial_credit and not monthly and trial_price is not None:
        trial = TrialRunway(
            have_fen=funds.trial_fen, own_fen=trial_price * order.units, burn_fen=trial_burn_fen
        )
    return Runway(
        have_fen=funds.cash_fen,
        own_fen=order.own_fen,
        burn_fen=burn_fen,
        unit=MONTH if monthly else HOUR,
        product=order.product,
        trial=trial,
    )


def order_of(instance: Instance, *, key: OrderKey | None = None, nodes: int = 0) -> Order:
    """The order of a saved instance (ordered now, or started): a cluster's rank stands for its
    whole cluster, of `nodes` ranks (counted when 0), which are placed, started and billed
    together. `key`: the order's Idempotency-Key (None for a start)."""
    gang = gang_of(instance)
    if gang and not nodes:
        nodes = gang_members(gang).count()
    units = nodes if gang else 1
    return Order(
        product="cluster" if gang else "instance",
        tenant_id=instance.tenant_id,
        created_by_id=instance.created_by_id,
        offering=instance.offering,
        gpus=instance.offering.gpu_count * units,
        billing=instance.billing,
        units=units,
        region_id=instance.region_id,
        key=key,
        pk=instance.id,
        gang=gang,
        paid=period_active(instance),
        queued=instance.status == InstanceStatus.QUEUED,
    )


def runway_of(instance: Instance, wallet: Wallet, *, burn: tuple[int, int] | None = None) -> Runway:
    """An instance's runway; a cluster's rank stands for its whole cluster (order_of)."""
    return order_runway(order_of(instance), wallet, burn=burn)


def runway_check(found: Runway) -> None:
    """Refuse (402) a start the balance does not cover, saying both parts of what it needs, in
    cash and, where the offering has a trial price, in trial credit."""
    if found.covered:
        return
    raise InsufficientBalance(runway_message(found))


def runway_message(found: Runway) -> str:
    """Why the balance does not cover this runway: in cash at the standard prices and, where
    the offering has a trial price, in trial credit at the trial prices."""
    amounts = {
        "have": format_fen(found.have_fen),
        "need": format_fen(found.need_fen),
        "own": format_fen(found.own_fen),
        "burn": format_fen(found.burn_fen),
        "unit": _(found.unit),
    }
    if found.product == "endpoint":  # in cash alone, and without what instances burn
        return _(
            "Your cash balance of %(have)s does not cover %(need)s (one hour of this "
            "endpoint). Top up to continue."
        ) % {"have": amounts["have"], "need": amounts["need"]}
    if found.product == "cluster" and not found.burn_fen:
        cash = _(
            "Your cash balance of %(have)s does not cover %(need)s (one %(unit)s of this cluster)."
        )
    elif found.product == "cluster":
        cash = _(
            "Your cash balance of %(have)s does not cover %(need)s: one %(unit)s of this cluster "
            "(%(own)s) plus one hour of what your running instances burn (%(burn)s)."
        )
    elif not found.burn_fen:
        cash = _(
            "Your cash balance of %(have)s does not cover %(need)s (one %(unit)s of this instance)."
        )
    else:
        cash = _(
            "Your cash balance of %(have)s does not cover %(need)s: one %(unit)s of this instance "
            "(%(own)s) plus one hour of what your running instances burn (%(burn)s)."
        )
    parts = [cash % amounts]
    if found.trial is not None:
        parts.append(_trial_message(found.trial))
    parts.append(_("Top up to continue."))
    return " ".join(parts)


def _trial_message(trial: TrialRunway) -> str:
    """What the trial credit lacks, at the trial prices."""
    amounts = {
        "have": format_fen(trial.have_fen),
        "need": format_fen(trial.need_fen),
        "own": format_fen(trial.own_fen),
        "burn": format_fen(trial.burn_fen),
    }
    if trial.burn_fen:
        text = _(
            "Your trial credit of %(have)s does not cover %(need)s at the trial prices: one "
            "hour of it (%(own)s) plus one hour of your other instances that have a trial "
            "price (%(burn)s)."
        )
    else:
        text = _(
            "Your trial credit of %(have)s does not cover one hour of it at the trial price "
            "(%(need)s)."
        )
    return text % amounts


def admit(
    order: Order,
    *,
    hold: bool = True,
    runway: bool = True,
    budgets: bool = True,
    limits: bool = True,
) -> None:
    """Admit an order or a start of any product, or refuse it (the caller's transaction rolls
    back, whatever it saved): the account not on hold (billing.holds); then, under the tenant's
    wallet lock, so that the balance and the counts hold until commit, the order's runway, its
    orderer's and its team's budgets (instances.budgets), and the account's limits, read in one
    statement. A change that is less than a start (an endpoint scaled up) leaves out the checks
    it does not meet again (`hold`, `runway`, `budgets`, `limits`: False)."""
    if hold:
        account_hold_check(order.tenant_id)
    wallet = wallet_locked(order.tenant_id)
    reads = admission_reads(
        order.tenant_id,
        order.created_by_id,
        exclude=order.pk or "",
        exclude_gang=order.gang,
    )
    found = order_runway(order, wallet, burn=(reads.burn_fen, reads.trial_burn_fen))
    if runway:
        runway_check(found)
    if budgets:
        budget_check(order, found.own_fen, budgets=reads.budgets)
    if limits:
        limits_check(order, wallet, limits=reads.limits, usage=reads.usage)


def renewal_refusal(instance: Instance, *, now: datetime) -> Deferred | None:
    """A monthly rental's next month, admitted as an order of one more month of it (of this
    rank alone, for a cluster's): under the tenant's wallet lock, so that the budgets' reads and
    the charge that follows hold together against orders at the same moment, its orderer's and
    its team's budgets. None when they fit, else why not (the rental ends instead:
    instances.monthly); the balance is the charge's to refuse."""
    order = replace(order_of(instance, nodes=1), paid=False)
    wallet_locked(order.tenant_id)
    return budget_refusal(order, order.own_fen, renewal=True, now=now)


def limits_check(
    order: Order, wallet: Wallet, *, limits: Limits | None = None, usage: Usage | None = None
) -> None:
    """Refuse what takes the order's tenant over one of its limits, counting the order itself:
    GPUs of premium models while the account has never paid in, for an order trial credit may
    pay (409 `trial_limit`); GPUs held and queued, with what the tenant holds elsewhere that the
    product counts (`gpu_limit`: 409, an endpoint's 400 naming max_replicas); and, when the
    order waits in the queue, orders queued (429 `queue_limit`). The caller holds the tenant's
    wallet lock (`wallet`, from billing.selectors.wallet_locked) and rolls back on a refusal."""
    limits = limits or tenant_limits(order.tenant_id)
    usage = usage or tenant_usage(order.tenant_id)
    want = order.gpus
    counted = want if order.in_usage else 0  # its instances, saved, are in the usage already
    premium = usage.premium_gpus - counted
    if (
        order.trial_credit
        and order.offering.gpu_model.premium
        and premium + want > limits.trial_max_premium_gpus
        and not wallet_has_paid(wallet)
    ):
        raise Conflict(
            _(
                "An account on trial credit may hold at most %(limit)d GPUs of the premium models "
                "(%(models)s), queued ones included; you have %(have)d and this needs %(want)d "
                "more. Top up any amount to lift this limit."
            )
            % {
                "limit": limits.trial_max_premium_gpus,
                "models": ", ".join(premium_models()),
                "have": premium,
                "want": want,
            },
            code="trial_limit",
        )
    have = usage.gpus - counted + (order.held_elsewhere() if order.held_elsewhere else 0)
    if have + want > limits.max_running_gpus:
        raise _gpu_limit(order, limits.max_running_gpus, have)
    if order.queued and usage.queued > limits.max_queued_orders:
        raise TooManyRequests(
            _(
                "Your account may have at most %(limit)d orders waiting in the queue, and "
                "%(have)d are waiting. Wait for one to start or cancel one, or ask support to "
                "raise your queued-orders limit."
            )
            % {"limit": limits.max_queued_orders, "have": usage.queued - 1},
            code="queue_limit",
        )


def _gpu_limit(order: Order, limit: int, have: int) -> ServiceError:
    """The GPU limit's refusal, as each product has always said it: an endpoint's names the
    replicas it may scale to (its max_replicas field)."""
    if order.product == "endpoint":
        gpus = order.offering.gpu_count
        return InvalidInput(
            _(
                "Your account may hold at most %(limit)d GPUs; you hold or may scale to %(have)d "
                "and %(want)d replicas of %(gpus)d GPUs need %(need)d more. Lower max_replicas, "
                "or ask support to raise your GPU limit."
            )
            % {
                "limit": limit,
                "have": have,
                "want": order.gpus // gpus,
                "gpus": gpus,
                "need": order.gpus,
            },
            code="gpu_limit",
            field="max_replicas",
        )
    return Conflict(
        _(
            "Your account may hold at most %(limit)d GPUs, starting, running and queued "
            "together; you have %(have)d and this needs %(want)d more. Stop or terminate an "
            "instance, or ask support to raise your GPU limit."
        )
        % {"limit": limit, "have": have, "want": order.gpus},
        code="gpu_limit",
    )
