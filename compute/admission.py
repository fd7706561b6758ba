"""Order admission, for every product (an instance, a cluster, an inference endpoint): what an
order or a start must meet before it may hold or wait for GPUs: the account not on hold, a
runway on the balance, its orderer's and its team's budgets, and the account's limits, all in
one function (admit), which takes the order as a compute.orders.Order. The checks run under the
tenant's wallet lock (billing.selectors.wallet_locked), so the balance and the counts hold until
the decision commits and two orders at once cannot both pass.

What admission counts of a tenant (what its instances burn an hour and hold, and the budgets
that apply to the orderer) is read by the app that owns those rows, through the reader it
registers here from its AppConfig.ready (admission_reader_register: the instances app's, which
counts endpoints' replicas through the budgets' spenders); the rule is here, once.

The runway is one hour of the order (a month for a monthly rental; of every rank, for a
cluster) plus one hour of what the tenant's other instances burn, in cash at the standard
prices; or, for an hourly instance of an offering with a trial price, the same hour at the trial
prices in trial credit (the money the minutes would then be paid from: instances.charges). An
endpoint's is an hour of one replica (of its minimum, when more), in cash only.

The limits are how many orders may wait in the queue, how many GPUs an account may hold and
wait for, and how many GPUs of the premium models an account living on trial credit may; an
operator sets an account's own in the admin (TenantLimits), an empty one is the setting's
default."""

from dataclasses import dataclass
from typing import NamedTuple, Protocol

from django.conf import settings
from django.db import connection
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.holds import account_hold_check
from billing.models import Wallet
from billing.selectors import wallet_has_paid, wallet_locked
from compute.choices import BillingMode
from compute.models import Offering, TenantLimits
from compute.orders import Order, Product, admission_seen
from compute.token_caps import token_cap_check
from fleet.models import GpuModel
from starverse.core.errors import (
    Conflict,
    InsufficientBalance,
    InvalidInput,
    ServiceError,
    TooManyRequests,
)
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
class Limits:
    """A tenant's limits in force: its operator-set ones, else the settings' defaults."""

    max_queued_orders: int
    max_running_gpus: int
    trial_max_premium_gpus: int


def tenant_limits(tenant_id: str) -> Limits:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT max_queued_orders, max_running_gpus, trial_max_premium_gpus "  # noqa: S608
            f"FROM {TenantLimits._meta.db_table} WHERE tenant_id = %s",
            [tenant_id],
        )
        own = cursor.fetchone() or (None, None, None)
    return limits_of(*own)


def limits_of(queued: int | None, gpus: int | None, premium: int | None) -> Limits:
    """The limits in force from a tenant's own (None: not set, the setting's default)."""
    return Limits(
        max_queued_orders=settings.MAX_QUEUED_ORDERS if queued is None else queued,
        max_running_gpus=settings.MAX_RUNNING_GPUS if gpus is None else gpus,
        trial_max_premium_gpus=settings.TRIAL_MAX_PREMIUM_GPUS if premium is None else premium,
    )


def premium_models() -> list[str]:
    """The names of the premium GPU models, as the trial limit's refusal lists them."""
    return list(
        GpuModel.objects.filter(premium=True).order_by("name").values_list("name", flat=True)
    )


@dataclass(frozen=True)
class Usage:
    """What a tenant holds and waits for, as its limits count it: orders queued, and GPUs of
    instances holding GPUs (starting, running, stopping) or queued, all and of premium models."""

    queued: int
    gpus: int
    premium_gpus: int


@dataclass(frozen=True)
class AdmissionReads:
    """What admitting an order reads under its tenant's wallet lock, read together: what the
    tenant's other instances burn an hour (at the standard and at the trial prices), its
    limits and usage, and the monthly budgets (user id or None for the team's, fen) that
    apply to the orderer."""

    burn_fen: int
    trial_burn_fen: int
    limits: Limits
    usage: Usage
    budgets: list[tuple[str | None, int]]


class AdmissionReader(Protocol):
    """What admission reads of a tenant, from the app that owns the rows it counts."""

    def reads(self, order: Order) -> AdmissionReads:
        """Everything admit reads, together (one statement), under the wallet lock: what the
        tenant's others burn (not the order's own row or gang), its limits and usage, and the
        budgets that apply to the orderer."""
        ...

    def burn(self, order: Order) -> tuple[int, int]:
        """What the tenant's others burn an hour, at the standard and the trial prices."""
        ...

    def usage(self, tenant_id: str) -> Usage: ...

    def budget_check(
        self, order: Order, need_fen: int, budgets: list[tuple[str | None, int]]
    ) -> None:
        """Refuse (402 `budget_exceeded`) an order its orderer's or team's budget no longer
        fits."""
        ...


_readers: list[AdmissionReader] = []


def admission_reader_register(reader: AdmissionReader) -> None:
    """Called from the AppConfig.ready of the app whose rows admission counts (instances)."""
    _readers[:] = [reader]


def admission_reader() -> AdmissionReader:
    if not _readers:
        raise LookupError("admission has no reader: the instances app registers it")
    return _readers[0]


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
    message says so). `idle_trial_fen`: trial credit the wallet holds that cannot pay this
    order (its offering has no trial price, or it is monthly): its refusal says so, since the
    balance shown includes it."""

    have_fen: int
    own_fen: int
    burn_fen: int
    unit: str
    product: Product = "instance"
    trial: TrialRunway | None = None
    idle_trial_fen: int = 0
    spot: bool = False

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
        burn = admission_reader().burn(order)
    burn_fen, trial_burn_fen = burn
    funds = runway_funds(wallet)
    monthly = order.billing == BillingMode.MONTHLY
    trial_price = order.offering.trial_price_per_hour_fen
    if order.cpu_only:  # no-GPU mode: trial credit pays it at the same price as cash
        monthly, trial_price = False, order.offering.cpu_only_price_per_hour_fen
    trial = None
    # trial credit pays the standard hourly minutes only: a spot rental is paid in cash
    if order.trial_credit and order.billing == BillingMode.HOURLY and trial_price is not None:
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
        idle_trial_fen=funds.trial_fen if trial is None and order.trial_credit else 0,
        spot=order.billing == BillingMode.SPOT,
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
    elif found.idle_trial_fen > 0:
        parts.append(_idle_trial_message(found))
    parts.append(_("Top up to continue."))
    return " ".join(parts)


def _idle_trial_message(found: Runway) -> str:
    """Why the trial credit the balance shows does not pay this order, and what it pays for."""
    have = format_fen(found.idle_trial_fen)
    if found.unit == MONTH:
        return _("Your trial credit of %(have)s pays by the hour only, not monthly rentals.") % {
            "have": have
        }
    if found.spot:
        return _(
            "Your trial credit of %(have)s does not pay for interruptible (spot) rentals, which "
            "are paid in cash."
        ) % {"have": have}
    names = trial_offerings()
    if not names:
        return _("Your trial credit of %(have)s does not pay for this offering.") % {"have": have}
    return _(
        "Your trial credit of %(have)s does not pay for this offering; it pays for %(offerings)s."
    ) % {"have": have, "offerings": ", ".join(names)}


def trial_offerings() -> list[str]:
    """The names of the active offerings trial credit pays for (those with a trial price), in
    the reader's language, as the catalogue lists them."""
    rows = Offering.objects.filter(active=True, trial_price_per_hour_fen__isnull=False)
    return [str(offering) for offering in rows]  # in the catalogue's order (Meta.ordering)


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
    statement, and last the spending caps of the API token it is made through
    (compute.token_caps), which then records it. A change that is less than a start (an
    endpoint scaled up) leaves out the checks it does not meet again (`hold`, `runway`,
    `budgets`, `limits`: False). A dry run (compute.dryrun) sees the order here."""
    admission_seen(order)
    if hold:
        account_hold_check(order.tenant_id)
    wallet = wallet_locked(order.tenant_id)
    reader = admission_reader()
    reads = reader.reads(order)
    found = order_runway(order, wallet, burn=(reads.burn_fen, reads.trial_burn_fen))
    if runway:
        runway_check(found)
    if budgets:
        reader.budget_check(order, found.own_fen, reads.budgets)
    if limits:
        limits_check(order, wallet, limits=reads.limits, usage=reads.usage)
    token_cap_check(order, found.own_fen)


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
    usage = usage or admission_reader().usage(order.tenant_id)
    want = order.gpus
    counted = want if order.in_usage else 0  # its instances, saved, are in the usage already
    premium = usage.premium_gpus - counted
    if want == 0:  # no-GPU mode: it takes no GPUs, so no GPU limit can refuse it
        return
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
