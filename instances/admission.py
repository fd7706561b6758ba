"""What an order or a start must meet before it may hold or wait for GPUs: a runway on the
balance, and the account's limits. Both are checked under the tenant's wallet lock
(billing.selectors.wallet_locked), so the balance and the counts hold until the decision
commits and two orders at once cannot both pass.

The runway is one hour of the instance (a month for a monthly rental) plus one hour of what the
tenant's other instances burn, in cash at the standard prices; or, for an hourly instance of an
offering with a trial price, the same hour at the trial prices in trial credit (the money the
minutes would then be paid from: instances.charges).

The limits are how many orders may wait in the queue, how many GPUs an account may hold and
wait for, and how many GPUs of the premium models an account living on trial credit may; an
operator sets an account's own in the admin (TenantLimits), an empty one is the setting's
default."""

from dataclasses import dataclass

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.models import Wallet
from billing.selectors import wallet_has_paid, wallet_locked
from compute.choices import BillingMode
from compute.models import Offering
from instances.budgets import budget_check
from instances.charges import period_active
from instances.choices import InstanceStatus
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
from starverse.core.errors import Conflict, InsufficientBalance, TooManyRequests
from starverse.core.money import format_fen

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
    nothing, so they are not counted); and the cash the wallet has (net of arrears). `trial`:
    the runway at trial prices, for an hourly instance of an offering with a trial price; either
    covers the start. `cluster`: the runway is a whole cluster's (its message says so)."""

    have_fen: int
    own_fen: int
    burn_fen: int
    unit: str
    cluster: bool = False
    trial: TrialRunway | None = None

    @property
    def need_fen(self) -> int:
        return self.own_fen + self.burn_fen

    @property
    def covered(self) -> bool:
        return self.have_fen >= self.need_fen or (self.trial is not None and self.trial.covered)


HOUR, MONTH = gettext_noop("hour"), gettext_noop("month")


def runway(
    *,
    wallet: Wallet,
    offering: Offering,
    billing: str,
    paid: bool = False,
    exclude: str = "",
    nodes: int = 1,
    exclude_cluster: str = "",
    burn: tuple[int, int] | None = None,
) -> Runway:
    """The runway of an instance of `offering` billed so, for the tenant of `wallet`; `paid`:
    a monthly rental inside its paid month; `exclude`: the instance itself, when it is placed.
    A cluster's is that of its `nodes` ranks together, its own ranks (`exclude_cluster`) left
    out of what the tenant burns. `burn`: what the others burn an hour (standard, trial), when
    the caller read it already (admit)."""
    monthly = billing == BillingMode.MONTHLY
    own = offering.price_per_month_fen if monthly else offering.price_per_hour_fen
    if burn is None:
        rows = spend_rows(
            [wallet.tenant_id], starting=True, exclude=exclude, exclude_cluster=exclude_cluster
        )
        burn = (rows[0][1] or 0, rows[0][2] or 0) if rows else (0, 0)
    burn_fen, trial_burn_fen = burn
    trial = None
    if not monthly and offering.trial_price_per_hour_fen is not None:
        trial = TrialRunway(
            have_fen=wallet.promo_free_fen,
            own_fen=offering.trial_price_per_hour_fen * nodes,
            burn_fen=trial_burn_fen,
        )
    return Runway(
        # arrears exist only while cash is zero: what is owed counts against the runway
        have_fen=wallet.cash_free_fen - wallet.arrears_fen,
        own_fen=0 if paid else (own or 0) * nodes,
        burn_fen=burn_fen,
        unit=MONTH if monthly else HOUR,
        cluster=bool(exclude_cluster),
        trial=trial,
    )


def runway_of(instance: Instance, wallet: Wallet, *, burn: tuple[int, int] | None = None) -> Runway:
    """An instance's runway; a cluster's rank stands for its whole cluster (its ranks are
    placed, started and billed together). `burn`: read already, for an instance (runway)."""
    if instance.cluster_id:
        return runway(
            wallet=wallet,
            offering=instance.offering,
            billing=instance.billing,
            paid=period_active(instance),
            nodes=Instance.objects.filter(
                cluster_id=instance.cluster_id, rank__isnull=False
            ).count(),
            exclude_cluster=instance.cluster_id,
        )
    return runway(
        wallet=wallet,
        offering=instance.offering,
        billing=instance.billing,
        paid=period_active(instance),
        exclude=instance.id,
        burn=burn,
    )


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
    if found.cluster and not found.burn_fen:
        cash = _(
            "Your cash balance of %(have)s does not cover %(need)s (one %(unit)s of this cluster)."
        )
    elif found.cluster:
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
    trial = found.trial
    if trial is not None:
        trial_amounts = {
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
        parts.append(text % trial_amounts)
    parts.append(_("Top up to continue."))
    return " ".join(parts)


def admit(instance: Instance) -> None:
    """Under the tenant's wallet lock (so that the balance and the counts hold until commit):
    the runway of the saved instance, its orderer's and its team's budgets (instances.budgets),
    then its tenant's limits."""
    wallet = wallet_locked(instance.tenant_id)
    reads = None
    if not instance.cluster_id:  # a cluster's ranks count themselves: read one by one
        reads = admission_reads(instance.tenant_id, instance.created_by_id, exclude=instance.id)
    burn = None if reads is None else (reads.burn_fen, reads.trial_burn_fen)
    found = runway_of(instance, wallet, burn=burn)
    runway_check(found)
    budget_check(instance, found.own_fen, budgets=None if reads is None else reads.budgets)
    if reads is None:
        limits_check(instance, wallet)
    else:
        limits_check(instance, wallet, limits=reads.limits, usage=reads.usage)


def limits_check(
    instance: Instance, wallet: Wallet, *, limits: Limits | None = None, usage: Usage | None = None
) -> None:
    """Refuse what takes the instance's tenant over one of its limits, counting the instance
    (saved, queued or placed) itself: GPUs of premium models while the account has never paid
    in (409 `trial_limit`), GPUs held and queued (409 `gpu_limit`), and, when the instance
    waits in the queue, orders queued (429 `queue_limit`). The caller holds the tenant's wallet
    lock (`wallet`, from billing.selectors.wallet_locked) and rolls back on a refusal."""
    tenant_id = instance.tenant_id
    limits = limits or tenant_limits(tenant_id)
    usage = usage or tenant_usage(tenant_id)
    want = instance.offering.gpu_count
    if instance.cluster_id:
        want *= Instance.objects.filter(cluster_id=instance.cluster_id, rank__isnull=False).count()
    if (
        instance.offering.gpu_model.premium
        and usage.premium_gpus > limits.trial_max_premium_gpus
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
                "have": usage.premium_gpus - want,
                "want": want,
            },
            code="trial_limit",
        )
    if usage.gpus > limits.max_running_gpus:
        raise Conflict(
            _(
                "Your account may hold at most %(limit)d GPUs, starting, running and queued "
                "together; you have %(have)d and this needs %(want)d more. Stop or terminate an "
                "instance, or ask support to raise your GPU limit."
            )
            % {"limit": limits.max_running_gpus, "have": usage.gpus - want, "want": want},
            code="gpu_limit",
        )
    if instance.status == InstanceStatus.QUEUED and usage.queued > limits.max_queued_orders:
        raise TooManyRequests(
            _(
                "Your account may have at most %(limit)d orders waiting in the queue, and "
                "%(have)d are waiting. Wait for one to start or cancel one, or ask support to "
                "raise your queued-orders limit."
            )
            % {"limit": limits.max_queued_orders, "have": usage.queued - 1},
            code="queue_limit",
        )
