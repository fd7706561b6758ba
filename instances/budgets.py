"""Team budgets: what a member (or the whole team) may spend in a calendar month, and what
they spent. Spent is the usage the team's ledger charged this month for the instances and
inference endpoints the member made (the ledger's instance_id, which an endpoint's charges
fill with the endpoint's id, and the row's created_by attribute every charge), and what the
meter has accrued for them and not yet posted (their holdings' pending amounts), so it is
two queries, never a counter to keep in step. An order or a start (an endpoint's creation or scaling
up) whose own cost over its runway, on top of an hour of what the member (or the team) already
runs by the hour (hourly instances and endpoint replicas), does not fit what is left is refused
(402 `budget_exceeded`), and a monthly rental's next month that does not fit is not charged:
the rental ends at its paid month (instances.monthly); the metering tick stops a member's
running instances once their budget is spent (instances.metering), and the endpoints' pass
scales their endpoints to zero (endpoints.services.endpoints_over_budget_suspend). Endpoints,
an app above this one, register what budgets read of them (budget_spender_register)."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import connection, transaction
from django.db.models import F, Q, QuerySet, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.choices import TransactionKind
from billing.models import LedgerTransaction
from compute.choices import BillingMode
from compute.models import Holding
from instances.choices import STARTING_OR_RUNNING, InstanceStatus
from instances.gangs import gang_of
from instances.models import Instance
from starverse.accounts.audit import audit_record
from starverse.accounts.models import Budget, Membership, Role, Tenant, TenantKind, User
from starverse.accounts.teams import membership_role
from starverse.core.errors import InsufficientBalance, InvalidInput, NotFound
from starverse.core.money import format_fen
from starverse.core.roles import is_manager, require_owner
from starverse.core.text import Deferred, later, translate_stored


@dataclass(frozen=True)
class Spender:
    """A product above instances whose charges count in budgets (inference endpoints),
    registered from its AppConfig.ready (budget_spender_register) so budgets import none:
    `ordered(tenant_id, user_id)` is the ids of what the member ordered there (a values
    query, which the ledger's instance_id names); `hourly_fen(tenant_id, user_id, besides)`
    is an hour of what of theirs (the tenant's, `user_id` None) runs by the hour now, less
    the order `besides` itself."""

    ordered: Callable[[str, str], QuerySet[Any]]
    hourly_fen: Callable[[str, str | None, str | None], int]


_SPENDERS: dict[str, Spender] = {}


def budget_spender_register(product: str, spender: Spender) -> None:
    """Budgets count `product`'s charges and what it runs; registering again replaces it."""
    _SPENDERS[product] = spender


class BudgetExceeded(InsufficientBalance):
    code = "budget_exceeded"


def month_start(now: datetime | None = None) -> datetime:
    local = timezone.localtime(now or timezone.now())
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def mine(tenant_id: str, user_id: str) -> dict[str, str]:
    """What a member ordered in a tenant, as a filter."""
    return {"tenant_id": tenant_id, "created_by_id": user_id}


def spent_fen(tenant_id: str, user_id: str | None, *, now: datetime | None = None) -> int:
    """Usage charged to the tenant this month: for the instances and endpoints `user_id` made,
    or all of it (None). Reversed charges count back."""
    rows = LedgerTransaction.objects.filter(
        wallet__tenant_id=tenant_id,
        kind__in=(TransactionKind.USAGE, TransactionKind.REVERSAL),
        created_at__gte=month_start(now),
    ).exclude(instance_id="")
    if user_id is not None:
        ordered = Q(
            instance_id__in=Instance.objects.filter(**mine(tenant_id, user_id)).values("pk")
        )
        for product in sorted(_SPENDERS):
            ordered |= Q(instance_id__in=_SPENDERS[product].ordered(tenant_id, user_id))
        rows = rows.filter(ordered)
    posted = -int(rows.aggregate(total=Sum("amount_fen"))["total"] or 0)
    return posted + pending_fen(tenant_id, user_id)


def pending_fen(tenant_id: str, user_id: str | None) -> int:
    """Usage the meter has accrued and not yet posted (compute.metering), of what `user_id`
    made (instances, ranks, endpoint replicas) or of the whole team (None)."""
    held = Holding.objects.filter(tenant_id=tenant_id, metered_since__isnull=False)
    if user_id is not None:
        held = held.filter(created_by_id=user_id)
    total = held.aggregate(total=Sum(F("pending_cash_fen") + F("pending_promo_fen")))["total"]
    return int(total or 0)


@dataclass(frozen=True)
class BudgetState:
    budget: Budget
    spent_fen: int

    @property
    def left_fen(self) -> int:
        return max(0, self.budget.monthly_fen - self.spent_fen)


def budgets_of(
    tenant_id: str, *, now: datetime | None = None, viewer: Any = None
) -> list[BudgetState]:
    """The team's budgets with what each has spent this month; with a `viewer` (acting in the
    team, with their role), those they may read, for the API and the console alike: every
    budget for owners and admins, the team's own and their own for anyone else (another
    member's budget and spend are theirs and the managers')."""
    budgets = Budget.objects.filter(tenant_id=tenant_id).select_related("user")
    if viewer is not None and not is_manager(viewer):
        budgets = budgets.filter(Q(user__isnull=True) | Q(user_id=viewer.pk))
    return [BudgetState(b, spent_fen(tenant_id, b.user_id, now=now)) for b in budgets]


def budgets_sql() -> str:
    """The budgets that apply to an order of user `%(user)s` in tenant `%(tenant)s` (the
    member's own and the team's): id, user_id (None for the team's), monthly_fen. Read on its
    own by budget_refusal, and inside the order's admission statement
    (instances.selectors.admission_reads)."""
    return (
        f"SELECT id, user_id, monthly_fen FROM {Budget._meta.db_table} "  # noqa: S608
        "WHERE tenant_id = %(tenant)s AND (user_id = %(user)s OR user_id IS NULL)"
    )


class Ordered(Protocol):
    """What the budgets read of an order: an instance, or an inference endpoint."""

    @property
    def tenant_id(self) -> str: ...

    @property
    def created_by_id(self) -> str: ...


def budget_check(
    instance: Ordered, need_fen: int, *, budgets: list[tuple[str | None, int]] | None = None
) -> None:
    """Refuse (402 `budget_exceeded`) an order or start of a team's instance (or the creation
    or scaling up of an endpoint) whose cost over its runway (`need_fen`) is more than what is
    left of its orderer's monthly budget or the team's, naming the budget. Personal accounts
    have none."""
    refusal = budget_refusal(instance, need_fen, budgets=budgets)
    if refusal is not None:
        raise BudgetExceeded(translate_stored(refusal.source, refusal.params))


def budget_refusal(
    instance: Ordered,
    need_fen: int,
    *,
    queued: bool = False,
    renewal: bool = False,
    budgets: list[tuple[str | None, int]] | None = None,
    now: datetime | None = None,
) -> Deferred | None:
    """Why budget_check refuses, naming the budget and its amounts (to store, or to say), or
    None when it fits; `queued`: said of a queued order whose turn came (it keeps waiting);
    `renewal`: said of a monthly rental's next month (instances.monthly: it ends instead).
    `now`: the moment whose calendar month's spend counts."""
    # a plain query (every order asks it, and most accounts have no budget at all), unless the
    # caller read them already (`budgets`: (user id, or None for the team's; monthly fen))
    if budgets is None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT user_id, monthly_fen FROM ({budgets_sql()}) b ORDER BY id",  # noqa: S608
                {"tenant": instance.tenant_id, "user": instance.created_by_id},
            )
            budgets = cursor.fetchall()
    for user_id, monthly_fen in budgets:
        spent = spent_fen(instance.tenant_id, user_id, now=now)
        burn = burning_fen(instance, user_id)
        left = monthly_fen - spent
        if need_fen + burn <= left:
            continue
        team = Tenant.objects.only("name").get(pk=instance.tenant_id).name
        amounts = {
            "team": team,
            "budget": format_fen(monthly_fen),
            "spent": format_fen(spent),
            "need": format_fen(need_fen),
            "burn": format_fen(burn),
        }
        if renewal:
            return RENEWAL_MESSAGES[(user_id is None, burn > 0)] % amounts
        if not queued and _is_owner(instance):  # who would be told to ask an owner
            return OWNER_MESSAGES[(user_id is None, burn > 0)] % amounts
        return MESSAGES[(user_id is None, queued, burn > 0)] % amounts
    return None


def _is_owner(ordered: Ordered) -> bool:
    """Whether the orderer is an owner of the team: the one who sets its budgets."""
    return membership_role(ordered.tenant_id, ordered.created_by_id) == Role.OWNER


def _gang(ordered: Ordered) -> str:
    """The gang of an order (compute.orders.Order.gang) or of an instance (its holding's)."""
    if isinstance(ordered, Instance):
        return gang_of(ordered)
    return str(getattr(ordered, "gang", ""))


def burning_fen(instance: Ordered, user_id: str | None) -> int:
    """An hour of what the member (or the whole team, `user_id` None) already runs by the
    hour, besides this order (and the other ranks of its cluster, or this endpoint's own
    replicas): their hourly instances starting or running and their endpoints' replicas up
    now. What the budget pays on top of the order, so that orders one after another cannot
    each fit the same money."""
    rows = Instance.objects.filter(
        tenant_id=instance.tenant_id, billing=BillingMode.HOURLY, status__in=STARTING_OR_RUNNING
    ).exclude(pk=getattr(instance, "pk", None))
    if gang := _gang(instance):
        rows = rows.exclude(holding__gang=gang)
    if user_id is not None:
        rows = rows.filter(created_by_id=user_id)
    hourly = rows.aggregate(total=Sum("offering__price_per_hour_fen", default=0))["total"]
    besides = getattr(instance, "pk", None)
    others = sum(
        _SPENDERS[product].hourly_fen(instance.tenant_id, user_id, besides)
        for product in sorted(_SPENDERS)
    )
    return int(hourly) + others


MESSAGES = {
    (True, False, False): later(
        "The monthly budget of team %(team)s is %(budget)s; %(spent)s is spent; this "
        "order needs %(need)s over its runway. Ask an owner to raise the budget."
    ),
    (False, False, False): later(
        "Your monthly budget in team %(team)s is %(budget)s; %(spent)s is spent; this "
        "order needs %(need)s over its runway. Ask an owner to raise your budget."
    ),
    (True, True, False): later(
        "Not started: the monthly budget of team %(team)s is %(budget)s and %(spent)s is "
        "spent; this order needs %(need)s over its runway. It waits in the queue, uncharged, "
        "until an owner raises the budget or a new month begins."
    ),
    (False, True, False): later(
        "Not started: the monthly budget of whoever ordered it in team %(team)s is "
        "%(budget)s and %(spent)s is spent; this order needs %(need)s over its runway. It "
        "waits in the queue, uncharged, until an owner raises the budget or a new month "
        "begins."
    ),
    (True, False, True): later(
        "The monthly budget of team %(team)s is %(budget)s; %(spent)s is spent, and what "
        "the team already runs costs %(burn)s an hour; this order needs %(need)s over its "
        "runway on top of that. Stop something, or ask an owner to raise the budget."
    ),
    (False, False, True): later(
        "Your monthly budget in team %(team)s is %(budget)s; %(spent)s is spent, and what "
        "you already run costs %(burn)s an hour; this order needs %(need)s over its runway "
        "on top of that. Stop something, or ask an owner to raise your budget."
    ),
    (True, True, True): later(
        "Not started: the monthly budget of team %(team)s is %(budget)s, %(spent)s is spent "
        "and what the team runs costs %(burn)s an hour; this order needs %(need)s over its "
        "runway on top of that. It waits in the queue, uncharged, until something stops, an "
        "owner raises the budget or a new month begins."
    ),
    (False, True, True): later(
        "Not started: the monthly budget of whoever ordered it in team %(team)s is "
        "%(budget)s, %(spent)s is spent and what they run costs %(burn)s an hour; this order "
        "needs %(need)s over its runway on top of that. It waits in the queue, uncharged, "
        "until something stops, an owner raises the budget or a new month begins."
    ),
}


# (the team's budget, what is run by the hour counts): the refusal of an order of a team's owner,
# who sets the budgets (not told to ask an owner)
OWNER_MESSAGES = {
    (True, False): later(
        "The monthly budget of team %(team)s is %(budget)s; %(spent)s is spent; this order "
        "needs %(need)s over its runway. As an owner, you can raise the budget on the team's "
        "page."
    ),
    (False, False): later(
        "Your monthly budget in team %(team)s is %(budget)s; %(spent)s is spent; this order "
        "needs %(need)s over its runway. As an owner, you can raise it on the team's page."
    ),
    (True, True): later(
        "The monthly budget of team %(team)s is %(budget)s; %(spent)s is spent, and what the "
        "team already runs costs %(burn)s an hour; this order needs %(need)s over its runway on "
        "top of that. Stop something, or raise the budget on the team's page."
    ),
    (False, True): later(
        "Your monthly budget in team %(team)s is %(budget)s; %(spent)s is spent, and what you "
        "already run costs %(burn)s an hour; this order needs %(need)s over its runway on top "
        "of that. Stop something, or raise your budget on the team's page."
    ),
}


# (the team's budget, what is run by the hour counts): why a monthly rental's next month is not
# charged, as its timeline and the owners' mail say (instances.monthly)
RENEWAL_MESSAGES = {
    (True, False): later(
        "Monthly rental not renewed: the monthly budget of team %(team)s is %(budget)s and "
        "%(spent)s is spent this month; the next month costs %(need)s. The instance is stopped "
        "and its disk kept; starting it again is billed by the minute. An owner can raise the "
        "budget."
    ),
    (False, False): later(
        "Monthly rental not renewed: the monthly budget of whoever rented it in team %(team)s "
        "is %(budget)s and %(spent)s is spent this month; the next month costs %(need)s. The "
        "instance is stopped and its disk kept; starting it again is billed by the minute. An "
        "owner can raise the budget."
    ),
    (True, True): later(
        "Monthly rental not renewed: the monthly budget of team %(team)s is %(budget)s, "
        "%(spent)s is spent this month and what the team runs by the hour costs %(burn)s an "
        "hour; the next month costs %(need)s on top of that. The instance is stopped and its "
        "disk kept; starting it again is billed by the minute. An owner can raise the budget."
    ),
    (False, True): later(
        "Monthly rental not renewed: the monthly budget of whoever rented it in team %(team)s "
        "is %(budget)s, %(spent)s is spent this month and what they run by the hour costs "
        "%(burn)s an hour; the next month costs %(need)s on top of that. The instance is "
        "stopped and its disk kept; starting it again is billed by the minute. An owner can "
        "raise the budget."
    ),
}


def budget_set(
    *, actor: User, team: Tenant, user_id: str | None, monthly_fen: int, ip: str | None = None
) -> BudgetState:
    """Set a member's monthly budget (or the team's, `user_id` None); owners only. A budget
    below what is already spent this month is refused (400 `budget_below_spent`)."""
    if team.kind != TenantKind.TEAM:
        raise NotFound(_("No such team."))
    require_owner(actor, _("setting budgets"))
    if isinstance(monthly_fen, bool) or not isinstance(monthly_fen, int) or monthly_fen < 0:
        raise InvalidInput(
            _("monthly_fen: a whole number of fen, zero or more."), code="invalid_amount"
        )
    if user_id is not None and not Membership.objects.filter(tenant=team, user_id=user_id).exists():
        raise InvalidInput(_("user: not a member of this team."), code="not_member")
    spent = spent_fen(team.pk, user_id)
    if monthly_fen < spent:
        raise InvalidInput(
            _(
                "monthly_fen: %(budget)s is below the %(spent)s already spent this month; set "
                "at least that."
            )
            % {"budget": format_fen(monthly_fen), "spent": format_fen(spent)},
            code="budget_below_spent",
        )
    with transaction.atomic():
        budget, _created = Budget.objects.update_or_create(
            tenant=team,
            user_id=user_id,
            defaults={"monthly_fen": monthly_fen, "updated_at": timezone.now()},
        )
        audit_record(
            tenant_id=team.pk,
            actor=actor,
            action="budget.set",
            object_type="user" if user_id else "team",
            object_id=user_id or team.pk,
            data={"monthly_fen": monthly_fen},
            ip=ip,
        )
    return BudgetState(budget, spent)


def budgets_spent(
    *, now: datetime | None = None, tenants: QuerySet[Any, Any] | None = None
) -> list[tuple[str, str | None]]:
    """(team, member or None for the whole team) of every budget spent this month whose
    team has running instances (or is among `tenants`, a query of tenant ids): what the
    metering tick stops, and the endpoints' pass scales to zero."""
    if tenants is None:
        tenants = Instance.objects.filter(status=InstanceStatus.RUNNING).values("tenant_id")
    spent = []
    for budget in Budget.objects.filter(tenant_id__in=tenants):
        if spent_fen(budget.tenant_id, budget.user_id, now=now) >= budget.monthly_fen:
            spent.append((budget.tenant_id, budget.user_id))
    return spent
